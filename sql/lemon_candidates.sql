-- Lemon candidates: nodes with at least K unhealthy runs since a time (epoch seconds).
-- Checker errors (health 'error') never count. Works on SQLite and PostgreSQL; bind the
-- parameters since and k (e.g. now - 3600 and 3, the policy defaults). `slurmguard node show NODE` gives
-- the failing checks of each run.
SELECT n.name,
       COUNT(*) AS failures,
       MIN(r.started) AS first_failure,
       MAX(r.started) AS last_failure,
       n.lemon
FROM nodes n
JOIN runs r ON r.node_id = n.id
WHERE r.health = 'unhealthy' AND r.started >= :since
GROUP BY n.id, n.name, n.lemon
HAVING COUNT(*) >= :k
ORDER BY failures DESC, n.name;

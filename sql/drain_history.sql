-- Drain history: every drain, clear and state change since a time (parameter since), all actors, newest first.
-- actor_kind is slurmguard, admin, kubernetes or slurm; actor names the admin.
SELECT e.at, n.name AS node, e.kind, e.actor_kind, e.actor, e.source, e.reason
FROM events e
JOIN nodes n ON n.id = e.node_id
WHERE e.at >= :since
  AND e.kind IN ('drain', 'clear', 'reboot_request', 'state_change', 'lemon', 'lemon_cleared',
                 'drain_refused')
ORDER BY e.at DESC, e.id DESC;

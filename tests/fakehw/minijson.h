/*
 * A tiny JSON reader for the stand-in libnvidia-ml.so.1 (tests/fakehw/libnvml.c).
 *
 * Parses a whole document into a tree of jnode; enough for a test fixture's config
 * (objects, arrays, strings with the common escapes, numbers, true/false/null). Not a
 * general-purpose parser: \u escapes outside ASCII become '?', and numbers are doubles
 * (exact up to 2^53, far above any counter a test injects).
 */
#ifndef MINIJSON_H
#define MINIJSON_H

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jnode {
    enum jtype type;
    double num;           /* J_NUM, and J_BOOL (0/1) */
    char *str;            /* J_STR; the key when this node is an object member */
    char *key;
    struct jnode *child;  /* first element / member */
    struct jnode *next;   /* next sibling */
} jnode;

typedef struct {
    const char *p;
    const char *err;
} jparser;

static jnode *j_value(jparser *ps);

static void j_ws(jparser *ps) {
    while (*ps->p && isspace((unsigned char)*ps->p)) ps->p++;
}

static jnode *j_new(enum jtype t) {
    jnode *n = calloc(1, sizeof *n);
    if (n) n->type = t;
    return n;
}

static void j_free(jnode *n) {
    while (n) {
        jnode *next = n->next;
        j_free(n->child);
        free(n->str);
        free(n->key);
        free(n);
        n = next;
    }
}

static char *j_string_raw(jparser *ps) {
    /* ps->p is at the opening quote */
    size_t cap = 32, len = 0;
    char *out = malloc(cap);
    if (!out) { ps->err = "out of memory"; return NULL; }
    ps->p++;
    while (*ps->p && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = *ps->p;
                    if (!isxdigit((unsigned char)h)) { ps->err = "bad \\u escape"; free(out); return NULL; }
                    v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                    ps->p++;
                }
                c = v < 128 ? (char)v : '?';
                break;
            }
            case '"': case '\\': case '/': c = e; break;
            default: ps->err = "bad escape"; free(out); return NULL;
            }
        }
        if (len + 2 > cap) {
            char *bigger = realloc(out, cap *= 2);
            if (!bigger) { free(out); ps->err = "out of memory"; return NULL; }
            out = bigger;
        }
        out[len++] = c;
    }
    if (*ps->p != '"') { ps->err = "unterminated string"; free(out); return NULL; }
    ps->p++;
    out[len] = 0;
    return out;
}

static jnode *j_container(jparser *ps, enum jtype t, char close) {
    jnode *n = j_new(t), **tail;
    if (!n) { ps->err = "out of memory"; return NULL; }
    tail = &n->child;
    ps->p++;
    j_ws(ps);
    if (*ps->p == close) { ps->p++; return n; }
    for (;;) {
        char *key = NULL;
        jnode *v;
        j_ws(ps);
        if (t == J_OBJ) {
            if (*ps->p != '"') { ps->err = "expected a member name"; j_free(n); return NULL; }
            key = j_string_raw(ps);
            if (!key) { j_free(n); return NULL; }
            j_ws(ps);
            if (*ps->p != ':') { ps->err = "expected ':'"; free(key); j_free(n); return NULL; }
            ps->p++;
        }
        v = j_value(ps);
        if (!v) { free(key); j_free(n); return NULL; }
        v->key = key;
        *tail = v;
        tail = &v->next;
        j_ws(ps);
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; return n; }
        ps->err = t == J_OBJ ? "expected ',' or '}'" : "expected ',' or ']'";
        j_free(n);
        return NULL;
    }
}

static jnode *j_value(jparser *ps) {
    jnode *n;
    j_ws(ps);
    switch (*ps->p) {
    case '{': return j_container(ps, J_OBJ, '}');
    case '[': return j_container(ps, J_ARR, ']');
    case '"':
        n = j_new(J_STR);
        if (!n) { ps->err = "out of memory"; return NULL; }
        n->str = j_string_raw(ps);
        if (!n->str) { free(n); return NULL; }
        return n;
    case 't':
        if (strncmp(ps->p, "true", 4) == 0) { ps->p += 4; n = j_new(J_BOOL); if (n) n->num = 1; return n; }
        break;
    case 'f':
        if (strncmp(ps->p, "false", 5) == 0) { ps->p += 5; return j_new(J_BOOL); }
        break;
    case 'n':
        if (strncmp(ps->p, "null", 4) == 0) { ps->p += 4; return j_new(J_NULL); }
        break;
    default:
        if (*ps->p == '-' || isdigit((unsigned char)*ps->p)) {
            char *end;
            double v = strtod(ps->p, &end);
            if (end == ps->p) break;
            ps->p = end;
            n = j_new(J_NUM);
            if (n) n->num = v;
            return n;
        }
    }
    ps->err = "unexpected character";
    return NULL;
}

/* Parse text; on failure return NULL and set *err to a static message. */
static jnode *j_parse(const char *text, const char **err) {
    jparser ps = {text, NULL};
    jnode *root = j_value(&ps);
    if (root) {
        j_ws(&ps);
        if (*ps.p) { ps.err = "trailing characters"; j_free(root); root = NULL; }
    }
    if (!root && err) *err = ps.err ? ps.err : "parse error";
    return root;
}

/* Member `key` of object n, or NULL. */
static jnode *j_get(const jnode *n, const char *key) {
    if (!n || n->type != J_OBJ) return NULL;
    for (jnode *c = n->child; c; c = c->next)
        if (c->key && strcmp(c->key, key) == 0) return c;
    return NULL;
}

static double j_num(const jnode *n, const char *key, double dflt) {
    jnode *v = j_get(n, key);
    return v && (v->type == J_NUM || v->type == J_BOOL) ? v->num : dflt;
}

static int j_bool(const jnode *n, const char *key, int dflt) {
    jnode *v = j_get(n, key);
    if (!v) return dflt;
    if (v->type == J_BOOL || v->type == J_NUM) return v->num != 0;
    return dflt;
}

static const char *j_str(const jnode *n, const char *key, const char *dflt) {
    jnode *v = j_get(n, key);
    return v && v->type == J_STR ? v->str : dflt;
}

static int j_len(const jnode *n) {
    int k = 0;
    if (!n || (n->type != J_ARR && n->type != J_OBJ)) return 0;
    for (jnode *c = n->child; c; c = c->next) k++;
    return k;
}

static jnode *j_at(const jnode *n, int i) {
    if (!n || n->type != J_ARR) return NULL;
    for (jnode *c = n->child; c; c = c->next)
        if (i-- == 0) return c;
    return NULL;
}

#endif

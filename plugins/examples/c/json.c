/* json.c: see json.h for what this scanner does and does not do. */
#include "json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffer ---------------------------------------------------------------------------- */

static void buf_reserve(json_buf *buf, size_t extra) {
    if (buf->len + extra <= buf->cap) return;
    size_t cap = buf->cap ? buf->cap : 64;
    while (cap < buf->len + extra) cap *= 2;
    char *data = realloc(buf->data, cap);
    if (!data) abort();
    buf->data = data;
    buf->cap = cap;
}

void json_buf_append(json_buf *buf, const char *s, size_t len) {
    if (len == 0) return;
    buf_reserve(buf, len);
    memcpy(buf->data + buf->len, s, len);
    buf->len += len;
}

void json_buf_append_str(json_buf *buf, const char *s) { json_buf_append(buf, s, strlen(s)); }

static void buf_push(json_buf *buf, char c) { json_buf_append(buf, &c, 1); }

void json_buf_free(json_buf *buf) {
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

/* ---- scanning -------------------------------------------------------------------------- */

typedef struct {
    const char *p;
    const char *end;
    const char *err;
} scanner;

static void skip_ws(scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool fail(scanner *s, const char *msg) {
    if (!s->err) s->err = msg;
    return false;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* s->p at the opening quote; leaves s->p after the closing quote. */
static bool scan_string(scanner *s) {
    s->p++;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return true;
        }
        if (c < 0x20) return fail(s, "control character in string");
        if (c == '\\') {
            s->p++;
            if (s->p >= s->end) break;
            switch (*s->p) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                s->p++;
                break;
            case 'u':
                s->p++;
                for (int i = 0; i < 4; i++, s->p++)
                    if (s->p >= s->end || hex_value(*s->p) < 0) return fail(s, "bad \\u escape");
                break;
            default:
                return fail(s, "bad escape in string");
            }
            continue;
        }
        s->p++;
    }
    return fail(s, "unterminated string");
}

static bool scan_digits(scanner *s) {
    const char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
    return s->p > start;
}

static bool scan_number(scanner *s) {
    if (*s->p == '-') s->p++;
    if (s->p < s->end && *s->p == '0') {
        s->p++;
    } else if (!scan_digits(s)) {
        return fail(s, "bad number");
    }
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!scan_digits(s)) return fail(s, "bad number");
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (!scan_digits(s)) return fail(s, "bad number");
    }
    return true;
}

static bool scan_literal(scanner *s, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return fail(s, "unexpected character");
    s->p += n;
    return true;
}

static bool scan_value(scanner *s, json_span *out, int depth);

static bool scan_container(scanner *s, int depth, bool object) {
    char close = object ? '}' : ']';
    if (depth >= JSON_MAX_DEPTH) return fail(s, "nested too deeply");
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return true;
    }
    for (;;) {
        json_span item;
        if (object) {
            skip_ws(s);
            if (s->p >= s->end || *s->p != '"') return fail(s, "expected a member name");
            if (!scan_string(s)) return false;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':') return fail(s, "expected ':'");
            s->p++;
        }
        if (!scan_value(s, &item, depth + 1)) return false;
        skip_ws(s);
        if (s->p >= s->end) return fail(s, "unexpected end of input");
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p == close) {
            s->p++;
            return true;
        }
        return fail(s, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static bool scan_value(scanner *s, json_span *out, int depth) {
    skip_ws(s);
    if (s->p >= s->end) return fail(s, "unexpected end of input");
    out->start = s->p;
    bool ok;
    switch (*s->p) {
    case '{': out->kind = JSON_OBJECT; ok = scan_container(s, depth, true); break;
    case '[': out->kind = JSON_ARRAY; ok = scan_container(s, depth, false); break;
    case '"': out->kind = JSON_STRING; ok = scan_string(s); break;
    case 't': out->kind = JSON_BOOL; ok = scan_literal(s, "true"); break;
    case 'f': out->kind = JSON_BOOL; ok = scan_literal(s, "false"); break;
    case 'n': out->kind = JSON_NULL; ok = scan_literal(s, "null"); break;
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) {
            out->kind = JSON_NUMBER;
            ok = scan_number(s);
        } else {
            ok = fail(s, "unexpected character");
        }
    }
    out->end = s->p;
    return ok;
}

const char *json_parse(const char *text, size_t len, json_span *root) {
    scanner s = {text, text + len, NULL};
    if (!scan_value(&s, root, 0)) return s.err;
    skip_ws(&s);
    if (s.p != s.end) return "unexpected text after the value";
    return NULL;
}

/* ---- walking objects ------------------------------------------------------------------- */

void json_object_iter(json_span object, json_iter *it) {
    it->p = object.start + 1; /* after '{' */
    it->end = object.end - 1; /* at '}' */
}

bool json_object_next(json_iter *it, json_span *key, json_span *value) {
    /* The span was checked by json_parse, so these scans cannot fail. */
    scanner s = {it->p, it->end, NULL};
    skip_ws(&s);
    if (s.p < s.end && *s.p == ',') {
        s.p++;
        skip_ws(&s);
    }
    if (s.p >= s.end) return false;
    key->start = s.p;
    key->kind = JSON_STRING;
    scan_string(&s);
    key->end = s.p;
    skip_ws(&s);
    s.p++; /* ':' */
    scan_value(&s, value, 0);
    it->p = s.p;
    return true;
}

bool json_object_find(json_span object, const char *name, size_t name_len, json_span *key,
                      json_span *value) {
    json_iter it;
    json_span k, v;
    bool found = false;
    json_object_iter(object, &it);
    while (json_object_next(&it, &k, &v)) {
        if (json_string_equals(k, name, name_len)) {
            *key = k;
            *value = v;
            found = true;
        }
    }
    return found;
}

/* ---- strings --------------------------------------------------------------------------- */

static void push_utf8(json_buf *buf, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    json_buf_append(buf, b, n);
}

static uint32_t read_hex4(const char *p) {
    return (uint32_t)(hex_value(p[0]) << 12 | hex_value(p[1]) << 8 | hex_value(p[2]) << 4 |
                      hex_value(p[3]));
}

bool json_string_decode(json_span str, json_buf *buf) {
    const char *p = str.start + 1, *end = str.end - 1;
    while (p < end) {
        const char *run = p;
        while (p < end && *p != '\\') p++;
        json_buf_append(buf, run, (size_t)(p - run));
        if (p >= end) break;
        p++; /* backslash */
        char c = *p++;
        switch (c) {
        case 'b': buf_push(buf, '\b'); break;
        case 'f': buf_push(buf, '\f'); break;
        case 'n': buf_push(buf, '\n'); break;
        case 'r': buf_push(buf, '\r'); break;
        case 't': buf_push(buf, '\t'); break;
        case 'u': {
            uint32_t cp = read_hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return false;
                uint32_t low = read_hex4(p + 2);
                if (low < 0xDC00 || low > 0xDFFF) return false;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                p += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return false;
            }
            push_utf8(buf, cp);
            break;
        }
        default: buf_push(buf, c); break; /* '"', '\\', '/' */
        }
    }
    return true;
}

bool json_string_equals(json_span s, const char *name, size_t name_len) {
    /* Fast path: no escapes, compare the raw text. */
    size_t raw = (size_t)(s.end - s.start) - 2;
    if (!memchr(s.start + 1, '\\', raw)) return raw == name_len && memcmp(s.start + 1, name, raw) == 0;
    json_buf b = {0};
    bool eq = json_string_decode(s, &b) && b.len == name_len && memcmp(b.data, name, name_len) == 0;
    json_buf_free(&b);
    return eq;
}

void json_write_string(json_buf *buf, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    buf_push(buf, '"');
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        json_buf_append(buf, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': json_buf_append(buf, "\\\"", 2); break;
        case '\\': json_buf_append(buf, "\\\\", 2); break;
        case '\n': json_buf_append(buf, "\\n", 2); break;
        case '\r': json_buf_append(buf, "\\r", 2); break;
        case '\t': json_buf_append(buf, "\\t", 2); break;
        case '\b': json_buf_append(buf, "\\b", 2); break;
        case '\f': json_buf_append(buf, "\\f", 2); break;
        default: {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xF]};
            json_buf_append(buf, esc, 6);
        }
        }
    }
    json_buf_append(buf, s + run, len - run);
    buf_push(buf, '"');
}

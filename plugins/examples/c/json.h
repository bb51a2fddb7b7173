/*
 * json.h: a small JSON scanner for the add-annotation example plugin.
 *
 * It does not build a tree. It checks that a document is well-formed JSON (RFC 8259: one value,
 * strict grammar, no trailing commas or comments, nesting at most JSON_MAX_DEPTH deep) and then
 * lets the caller walk objects member by member, pointing into the original text. The plugin uses
 * those positions to splice its change into the text it was given, so everything it does not
 * touch (key order, number spelling, other escapes) comes back byte for byte.
 *
 * Limits, on purpose:
 * - Input must be valid UTF-8; it is not re-checked (strings from the component model always
 *   are). Output strings are written as UTF-8 with only `"`, `\` and control characters escaped.
 * - A `\u` escape for a lone UTF-16 surrogate is refused when decoding (it has no UTF-8 form).
 * - Numbers are checked for grammar only, never converted.
 * - Member names are compared after decoding escapes, so `"met\u0061data"` is `metadata`. When
 *   an object names a member twice, json_object_find returns the last one, as most JSON
 *   libraries (and Kubernetes' own decoder) keep the last value.
 */
#ifndef MIMEO_EXAMPLE_JSON_H
#define MIMEO_EXAMPLE_JSON_H

#include <stdbool.h>
#include <stddef.h>

#define JSON_MAX_DEPTH 256

typedef enum {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_kind;

/* A value's text: [start, end). For strings the span includes the quotes. */
typedef struct {
    const char *start;
    const char *end;
    json_kind kind;
} json_span;

/* A growable byte buffer. All functions abort() when memory runs out. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
} json_buf;

/*
 * Checks that text[0..len) is one JSON value surrounded by optional whitespace. On success fills
 * *root and returns NULL; on failure returns a static message (e.g. "unexpected character").
 */
const char *json_parse(const char *text, size_t len, json_span *root);

/* Walks the members of an object span produced by json_parse. */
typedef struct {
    const char *p;
    const char *end;
} json_iter;

void json_object_iter(json_span object, json_iter *it);
/* Returns false after the last member. The key span is a JSON_STRING span. */
bool json_object_next(json_iter *it, json_span *key, json_span *value);
/* The last member called `name` (decoded comparison), or false if there is none. */
bool json_object_find(json_span object, const char *name, size_t name_len, json_span *key,
                      json_span *value);

/*
 * Decodes a string span into buf (appending; the buffer is not NUL-terminated). Returns false
 * for an escape that has no UTF-8 form (a lone surrogate).
 */
bool json_string_decode(json_span s, json_buf *buf);
/* Whether a string span decodes to exactly name[0..name_len). */
bool json_string_equals(json_span s, const char *name, size_t name_len);

/* Appends s[0..len) (UTF-8) as a JSON string literal, quotes included. */
void json_write_string(json_buf *buf, const char *s, size_t len);

void json_buf_append(json_buf *buf, const char *s, size_t len);
void json_buf_append_str(json_buf *buf, const char *s);
void json_buf_free(json_buf *buf);

#endif

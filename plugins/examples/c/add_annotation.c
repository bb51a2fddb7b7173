/*
 * add-annotation: a mimeo transform plugin in C (clang + wasi-libc + wit-bindgen c).
 *
 * Adds one annotation to `metadata.annotations` of every copy. Config:
 *
 *     {"key": "example.com/tenant", "value": "{{target.namespace}}"}
 *
 * `key` is required, non-empty and must not start with `mimeo.dev/` (mimeo's own annotations);
 * `value` defaults to "" and may contain `{{target.namespace}}`, replaced with the namespace the
 * copy is going to, and `{{inputs}}`, replaced with the names of the context's inputs joined by
 * `,` (empty when there are none). When the annotation already has that value the copy is left
 * `unchanged`.
 *
 * The object is not parsed into a tree: json.c checks the whole document, finds
 * `metadata.annotations` and the plugin splices its change into the text it was given.
 *
 * Memory, as wit-bindgen's C bindings define it: the arguments of an exported function belong to
 * it (we free them); what it returns is malloc'd and freed by the generated post-return code.
 */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "plugin.h"

#define NAME "add-annotation-c"
#define VERSION "0.1.0"
#define RESERVED_PREFIX "mimeo.dev/"
#define TEMPLATE "{{target.namespace}}"
#define INPUTS "{{inputs}}"

/* A plugin_string_t that owns a malloc'd copy of buf's bytes. */
static void to_string(json_buf *buf, plugin_string_t *out) {
    out->len = buf->len;
    out->ptr = (uint8_t *)(buf->len ? buf->data : malloc(1));
    if (!out->ptr) abort();
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

static void set_error(plugin_string_t *err, const char *a, const char *b) {
    json_buf msg = {0};
    json_buf_append_str(&msg, a);
    if (b) json_buf_append_str(&msg, b);
    to_string(&msg, err);
}

typedef struct {
    json_buf key;
    json_buf value;
} config;

static void config_free(config *c) {
    json_buf_free(&c->key);
    json_buf_free(&c->value);
}

/* Parses and checks the config. Returns NULL, or the error message (static text). */
static const char *parse_config(const plugin_string_t *text, config *out, const char **detail) {
    json_span root, key, value, name;
    *detail = NULL;
    const char *err = json_parse((const char *)text->ptr, text->len, &root);
    if (err) {
        *detail = err;
        return "config is not valid JSON: ";
    }
    if (root.kind != JSON_OBJECT) return "config must be a JSON object";

    if (!json_object_find(root, "key", 3, &name, &key) || key.kind == JSON_NULL)
        return "config.key is required";
    if (key.kind != JSON_STRING) return "config.key must be a string";
    if (!json_string_decode(key, &out->key)) return "config.key is not valid Unicode";
    if (out->key.len == 0) return "config.key must not be empty";
    if (out->key.len >= strlen(RESERVED_PREFIX) &&
        memcmp(out->key.data, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0)
        return "config.key must not start with " RESERVED_PREFIX " (mimeo's own annotations)";

    if (json_object_find(root, "value", 5, &name, &value) && value.kind != JSON_NULL) {
        if (value.kind != JSON_STRING) return "config.value must be a string";
        if (!json_string_decode(value, &out->value)) return "config.value is not valid Unicode";
    }
    return NULL;
}

/* Whether value contains pattern. */
static bool contains(const json_buf *value, const char *pattern) {
    const size_t plen = strlen(pattern);
    for (size_t i = 0; i + plen <= value->len; i++)
        if (memcmp(value->data + i, pattern, plen) == 0) return true;
    return false;
}

/* Replaces every pattern in value with with[0..with_len), left to right; the text put in is not
 * scanned again. */
static void replace_all(json_buf *value, const char *pattern, const char *with, size_t with_len) {
    const size_t plen = strlen(pattern);
    json_buf out = {0};
    size_t i = 0, run = 0;
    bool found = false;
    while (i + plen <= value->len) {
        if (memcmp(value->data + i, pattern, plen) != 0) {
            i++;
            continue;
        }
        found = true;
        json_buf_append(&out, value->data + run, i - run);
        json_buf_append(&out, with, with_len);
        i += plen;
        run = i;
    }
    if (found) {
        json_buf_append(&out, value->data + run, value->len - run);
        json_buf_free(value);
        *value = out;
    }
}

/* Replaces {{target.namespace}} and then {{inputs}} in value. Returns NULL, or the error message
 * (static text) when the value uses {{target.namespace}} and the target has none. */
static const char *expand(json_buf *value,
                          const exports_mimeo_transform_transformer_context_t *ctx) {
    if (contains(value, TEMPLATE)) {
        if (!ctx->target.namespace_.is_some)
            return "config.value uses " TEMPLATE
                   " but the target has no namespace (cluster-scoped)";
        replace_all(value, TEMPLATE, (const char *)ctx->target.namespace_.val.ptr,
                    ctx->target.namespace_.val.len);
    }
    if (contains(value, INPUTS)) {
        json_buf names = {0};
        for (size_t i = 0; i < ctx->inputs.len; i++) {
            if (i > 0) json_buf_append_str(&names, ",");
            json_buf_append(&names, (const char *)ctx->inputs.ptr[i].name.ptr,
                            ctx->inputs.ptr[i].name.len);
        }
        replace_all(value, INPUTS, names.data, names.len);
        json_buf_free(&names);
    }
    return NULL;
}

/* Logs "<before><key><after> on the copy of <Kind> <namespace>/<name>" at info level. */
static void log_info(const char *before, const json_buf *key, const char *after,
                     const exports_mimeo_transform_transformer_context_t *ctx) {
    json_buf msg = {0};
    json_buf_append_str(&msg, before);
    json_buf_append(&msg, key->data, key->len);
    json_buf_append_str(&msg, after);
    json_buf_append_str(&msg, " on the copy of ");
    json_buf_append(&msg, (const char *)ctx->source.kind.ptr, ctx->source.kind.len);
    json_buf_append_str(&msg, " ");
    if (ctx->source.namespace_.is_some) {
        json_buf_append(&msg, (const char *)ctx->source.namespace_.val.ptr,
                        ctx->source.namespace_.val.len);
        json_buf_append_str(&msg, "/");
    }
    json_buf_append(&msg, (const char *)ctx->source.name.ptr, ctx->source.name.len);
    plugin_string_t line = {(uint8_t *)msg.data, msg.len};
    mimeo_transform_log_log(MIMEO_TRANSFORM_LOG_LEVEL_INFO, &line);
    json_buf_free(&msg);
}

void exports_mimeo_transform_transformer_describe(
    exports_mimeo_transform_transformer_plugin_info_t *ret) {
    plugin_string_dup(&ret->name, NAME);
    plugin_string_dup(&ret->version, VERSION);
    plugin_string_dup(&ret->description,
                      "Adds one annotation (key and value from the config; {{target.namespace}} "
                      "and {{inputs}} in the value are replaced) to every copy. Written in C.");
    ret->kinds.ptr = NULL;
    ret->kinds.len = 0;
}

bool exports_mimeo_transform_transformer_validate_config(plugin_string_t *text,
                                                         plugin_string_t *err) {
    config cfg = {0};
    const char *detail;
    const char *msg = parse_config(text, &cfg, &detail);
    config_free(&cfg);
    plugin_string_free(text);
    if (msg) {
        set_error(err, msg, detail);
        return false;
    }
    return true;
}

/* The change, spliced into the object's text: out = text[0..at) + insert + text[resume..). */
typedef struct {
    size_t at;
    size_t resume;
    json_buf insert;
} splice;

static const char *plan(const plugin_string_t *object, const config *cfg, splice *sp,
                        bool *unchanged, const char **detail) {
    const char *text = (const char *)object->ptr;
    json_span root, k, metadata, annotations, current;
    *detail = NULL;
    *unchanged = false;

    const char *err = json_parse(text, object->len, &root);
    if (err) {
        *detail = err;
        return "object is not valid JSON: ";
    }
    if (root.kind != JSON_OBJECT) return "object must be a JSON object";
    if (!json_object_find(root, "metadata", 8, &k, &metadata) || metadata.kind != JSON_OBJECT)
        return "object.metadata must be an object";

    json_buf *ins = &sp->insert;
    if (!json_object_find(metadata, "annotations", 11, &k, &annotations)) {
        /* No annotations: add the member just before metadata's closing brace. */
        json_iter it;
        json_span mk, mv;
        json_object_iter(metadata, &it);
        bool empty = !json_object_next(&it, &mk, &mv);
        sp->at = sp->resume = (size_t)(metadata.end - 1 - text);
        json_buf_append_str(ins, empty ? "\"annotations\":{" : ",\"annotations\":{");
        json_write_string(ins, cfg->key.data, cfg->key.len);
        json_buf_append_str(ins, ":");
        json_write_string(ins, cfg->value.data, cfg->value.len);
        json_buf_append_str(ins, "}");
        return NULL;
    }
    if (annotations.kind == JSON_NULL) {
        /* "annotations": null becomes a one-member object. */
        sp->at = (size_t)(annotations.start - text);
        sp->resume = (size_t)(annotations.end - text);
        json_buf_append_str(ins, "{");
        json_write_string(ins, cfg->key.data, cfg->key.len);
        json_buf_append_str(ins, ":");
        json_write_string(ins, cfg->value.data, cfg->value.len);
        json_buf_append_str(ins, "}");
        return NULL;
    }
    if (annotations.kind != JSON_OBJECT) return "metadata.annotations must be an object";

    if (json_object_find(annotations, cfg->key.data, cfg->key.len, &k, &current)) {
        if (current.kind == JSON_STRING) {
            json_buf decoded = {0};
            bool same = json_string_decode(current, &decoded) && decoded.len == cfg->value.len &&
                        memcmp(decoded.data, cfg->value.data, decoded.len) == 0;
            json_buf_free(&decoded);
            if (same) {
                *unchanged = true;
                return NULL;
            }
        }
        /* Replace the (last) existing value. */
        sp->at = (size_t)(current.start - text);
        sp->resume = (size_t)(current.end - text);
        json_write_string(ins, cfg->value.data, cfg->value.len);
        return NULL;
    }

    /* Append a member before the annotations' closing brace. */
    json_iter it;
    json_span ak, av;
    json_object_iter(annotations, &it);
    bool empty = !json_object_next(&it, &ak, &av);
    sp->at = sp->resume = (size_t)(annotations.end - 1 - text);
    if (!empty) json_buf_append_str(ins, ",");
    json_write_string(ins, cfg->key.data, cfg->key.len);
    json_buf_append_str(ins, ":");
    json_write_string(ins, cfg->value.data, cfg->value.len);
    return NULL;
}

bool exports_mimeo_transform_transformer_transform(
    exports_mimeo_transform_transformer_context_t *ctx, plugin_string_t *object,
    exports_mimeo_transform_transformer_outcome_t *ret, plugin_string_t *err) {
    config cfg = {0};
    splice sp = {0};
    bool ok = false, unchanged = false;
    const char *detail = NULL;
    const char *msg = parse_config(&ctx->config, &cfg, &detail);

    if (!msg) msg = expand(&cfg.value, ctx);
    if (!msg) msg = plan(object, &cfg, &sp, &unchanged, &detail);

    if (msg) {
        set_error(err, msg, detail);
    } else if (unchanged) {
        log_info("annotation ", &cfg.key, " already set", ctx);
        ret->tag = MIMEO_TRANSFORM_TYPES_OUTCOME_UNCHANGED;
        ok = true;
    } else {
        json_buf out = {0};
        json_buf_append(&out, (const char *)object->ptr, sp.at);
        json_buf_append(&out, sp.insert.data, sp.insert.len);
        json_buf_append(&out, (const char *)object->ptr + sp.resume, object->len - sp.resume);
        log_info("set annotation ", &cfg.key, "", ctx);
        ret->tag = MIMEO_TRANSFORM_TYPES_OUTCOME_WRITE;
        to_string(&out, &ret->val.write);
        ok = true;
    }

    json_buf_free(&sp.insert);
    config_free(&cfg);
    exports_mimeo_transform_transformer_context_free(ctx);
    plugin_string_free(object);
    return ok;
}

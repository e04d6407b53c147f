/* Model files: JSON (parsed by cJSON) with // and block comments allowed.
 *
 *   { "name": "...", "description": "...",
 *     "layers": [ {"type": "conv2d", "name": "conv1", "out": 6, "kernel": 5, "pad": 2}, ... ] }
 *
 * Each layer reads the layer before it unless "input" (one name) or "inputs"
 * (a list) says otherwise; the name "input" is the model's input. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "nn/model.h"

/* Blanks out comments in place, keeping offsets so parse errors point at the right line.
 * Returns where a block comment that never ends begins (its text would be taken for
 * nothing), or NULL. */
static const char *blank_comments(char *s)
{
    bool in_string = false;
    for (char *p = s; *p; p++) {
        if (in_string) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                in_string = false;
        } else if (*p == '"') {
            in_string = true;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n')
                *p++ = ' ';
            if (!*p)
                break;
        } else if (p[0] == '/' && p[1] == '*') {
            char *open = p;
            p += 2; /* its own star cannot also close it */
            while (*p && !(p[0] == '*' && p[1] == '/'))
                p++;
            if (!*p)
                return open;
            for (char *q = open; q < p + 2; q++)
                if (*q != '\n')
                    *q = ' ';
            p++;
        }
    }
    return NULL;
}

/* A value as the file wrote it, for errors: a number, a string or its JSON type. */
static void describe_value(const cJSON *v, char *out, size_t cap)
{
    if (cJSON_IsNumber(v))
        snprintf(out, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(out, cap, "the string \"%.40s\"", v->valuestring);
    else
        snprintf(out, cap, "%s", cJSON_IsBool(v) ? "a boolean" : cJSON_IsNull(v) ? "null"
                                 : cJSON_IsArray(v)                  ? "a list"
                                                                     : "an object");
}

static void line_col(const char *text, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Keys every layer takes; the rest come from its type's ops->keys. */
static const char *const wiring_keys[] = {"type", "name", "input", "inputs", NULL};

static bool in_list(const char *const *list, const char *key)
{
    for (; *list; list++)
        if (strcmp(*list, key) == 0)
            return true;
    return false;
}

/* A key given twice in the object (cJSON keeps both and reads the first), or NULL. */
static const char *duplicate_key(const cJSON *obj)
{
    for (const cJSON *it = obj->child; it; it = it->next)
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
            if (strcmp(prev->string, it->string) == 0)
                return it->string;
    return NULL;
}

/* Every key of a layer object must apply to its type, once: a "linear" mistyped as "relu"
 * must not silently become a layer without its "out". */
static herd_status check_keys(const cJSON *obj, const herd_layer_ops *ops, int i, const char *lname,
                              const char *origin)
{
    const char *twice = duplicate_key(obj);
    if (twice)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer %d '%s' (%s): key \"%s\" is given twice",
                        origin, i, lname, ops->type, twice);
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (in_list(wiring_keys, it->string) || in_list(ops->keys, it->string))
            continue;
        const char *const *types = herd_layer_type_names();
        bool known = false;
        for (const char *const *t = types; *t && !known; t++)
            known = in_list(herd_layer_ops_find(*t)->keys, it->string);
        char takes[128] = "";
        for (const char *const *k = ops->keys; *k; k++)
            snprintf(takes + strlen(takes), sizeof takes - strlen(takes), "%s\"%s\"",
                     k == ops->keys ? "" : ", ", *k);
        if (!known)
            return HERD_ERR(HERD_ERR_FORMAT, "%s: layer %d '%s' (%s): unknown key \"%s\"",
                            origin, i, lname, ops->type, it->string);
        return HERD_ERR(HERD_ERR_FORMAT,
                        "%s: layer %d '%s' (%s): key \"%s\" does not apply to a %s layer (it takes "
                        "%s besides type, name and input); check the layer's \"type\"",
                        origin, i, lname, ops->type, it->string, ops->type,
                        *takes ? takes : "no other keys");
    }
    return HERD_OK;
}

static herd_status int_field(const cJSON *obj, const char *key, int lo, int hi, int *out,
                             const char *origin, const char *lname)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return HERD_OK;
    /* The range test comes first: converting an out-of-range double to int is undefined. */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
        v->valuedouble != (double)(int)v->valuedouble)
    {
        char got[96];
        describe_value(v, got, sizeof got);
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': \"%s\" must be an integer in [%d, %d], "
                        "got %s", origin, lname, key, lo, hi, got);
    }
    *out = v->valueint;
    return HERD_OK;
}

static herd_status float_field(const cJSON *obj, const char *key, float lo, float hi, float *out,
                               const char *origin, const char *lname)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return HERD_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi) {
        char got[96];
        describe_value(v, got, sizeof got);
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': \"%s\" must be a number in [%g, %g], "
                        "got %s", origin, lname, key, lo, hi, got);
    }
    *out = (float)v->valuedouble;
    return HERD_OK;
}

static herd_status bool_field(const cJSON *obj, const char *key, bool *out, const char *origin,
                              const char *lname)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return HERD_OK;
    if (!cJSON_IsBool(v))
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': \"%s\" must be true or false", origin,
                        lname, key);
    *out = cJSON_IsTrue(v);
    return HERD_OK;
}

static int find_layer(const herd_layer_spec *specs, int n, const char *name)
{
    if (strcmp(name, "input") == 0)
        return -1;
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(specs[i].name, name) == 0)
            return i;
    return -2;
}

static herd_status parse_inputs(const cJSON *obj, herd_layer_spec *specs, int i,
                                const char *origin)
{
    herd_layer_spec *s = &specs[i];
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(obj, "input");
    const cJSON *many = cJSON_GetObjectItemCaseSensitive(obj, "inputs");
    if (one && many)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': give \"input\" or \"inputs\", not both",
                        origin, s->name);
    if (!one && !many) {
        s->n_inputs = 1;
        s->inputs[0] = i - 1;
        return HERD_OK;
    }
    const cJSON *names[HERD_MAX_INPUTS];
    int n = 0;
    if (one) {
        names[n++] = one;
    } else {
        if (!cJSON_IsArray(many) || cJSON_GetArraySize(many) < 1 ||
            cJSON_GetArraySize(many) > HERD_MAX_INPUTS)
            return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': \"inputs\" must list 1 or %d names",
                            origin, s->name, HERD_MAX_INPUTS);
        const cJSON *it;
        cJSON_ArrayForEach(it, many) names[n++] = it;
    }
    for (int k = 0; k < n; k++) {
        if (!cJSON_IsString(names[k]))
            return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': inputs are layer names (strings)",
                            origin, s->name);
        int src = find_layer(specs, i, names[k]->valuestring);
        if (src == -2)
            return HERD_ERR(HERD_ERR_FORMAT,
                            "%s: layer '%s' reads '%s', which is not the name of an earlier layer",
                            origin, s->name, names[k]->valuestring);
        s->inputs[k] = src;
    }
    s->n_inputs = n;
    return HERD_OK;
}

static herd_status parse_layer(const cJSON *obj, herd_layer_spec *specs, int i, int classes,
                               const char *origin)
{
    herd_layer_spec *s = &specs[i];
    if (!cJSON_IsObject(obj))
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer %d must be an object", origin, i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsString(type))
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer %d has no \"type\"", origin, i);
    const herd_layer_ops *ops = herd_layer_ops_find(type->valuestring);
    if (!ops) {
        char list[256] = "";
        for (const char *const *t = herd_layer_type_names(); *t; t++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", t == herd_layer_type_names() ? "" : ", ", *t);
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer %d: unknown type '%s' (known: %s)", origin, i,
                        type->valuestring, list);
    }
    snprintf(s->type, sizeof s->type, "%s", type->valuestring);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (name && (!cJSON_IsString(name) || !*name->valuestring ||
                 strlen(name->valuestring) >= sizeof s->name - 16))
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer %d: \"name\" must be a short non-empty string",
                        origin, i);
    if (name)
        snprintf(s->name, sizeof s->name, "%s", name->valuestring);
    else
        snprintf(s->name, sizeof s->name, "%s%d", s->type, i);
    if (find_layer(specs, i, s->name) >= -1)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer name '%s' is used twice (or is reserved)",
                        origin, s->name);
    HERD_TRY(check_keys(obj, ops, i, s->name, origin));
    bool is_pool = strstr(s->type, "pool") != NULL;
    s->stride = 0;
    s->bias = true;
    s->p = 0.5f;
    s->eps = 1e-5f;
    s->momentum = 0.1f;
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(obj, "out");
    if (cJSON_IsString(out) && strcmp(out->valuestring, "classes") == 0)
        s->out = classes;
    else
        HERD_TRY(int_field(obj, "out", 1, 1 << 20, &s->out, origin, s->name));
    HERD_TRY(int_field(obj, "kernel", 1, 1024, &s->kernel, origin, s->name));
    HERD_TRY(int_field(obj, "stride", 1, 1024, &s->stride, origin, s->name));
    HERD_TRY(int_field(obj, "pad", 0, 1024, &s->pad, origin, s->name));
    HERD_TRY(float_field(obj, "p", 0.0f, 0.999f, &s->p, origin, s->name));
    HERD_TRY(float_field(obj, "eps", 0.0f, 1.0f, &s->eps, origin, s->name));
    HERD_TRY(float_field(obj, "momentum", 0.0f, 1.0f, &s->momentum, origin, s->name));
    HERD_TRY(float_field(obj, "init_std", 1e-6f, 1.0f, &s->init_std, origin, s->name));
    HERD_TRY(float_field(obj, "proj_init_std", 1e-6f, 1.0f, &s->proj_init_std, origin, s->name));
    /* Token ids travel as floats: exact below 2^24. */
    HERD_TRY(int_field(obj, "vocab", 1, 1 << 24, &s->vocab, origin, s->name));
    HERD_TRY(int_field(obj, "context", 1, 1 << 20, &s->context, origin, s->name));
    HERD_TRY(int_field(obj, "heads", 1, 1 << 16, &s->heads, origin, s->name));
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(obj, "tie");
    if (tie && (!cJSON_IsString(tie) || !*tie->valuestring ||
                strlen(tie->valuestring) >= sizeof s->tie))
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': \"tie\" must name an earlier "
                        "embedding layer", origin, s->name);
    if (tie)
        snprintf(s->tie, sizeof s->tie, "%s", tie->valuestring);
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(obj, "parallel");
    if (par && cJSON_IsString(par) && strcmp(par->valuestring, "column") == 0)
        s->parallel = HERD_TP_COLUMN;
    else if (par && cJSON_IsString(par) && strcmp(par->valuestring, "row") == 0)
        s->parallel = HERD_TP_ROW;
    else if (par)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: layer '%s': \"parallel\" is %s%s%s; it must be "
                        "\"column\" (output features split over --tensor-parallel ranks) or "
                        "\"row\" (input features split)", origin, s->name,
                        cJSON_IsString(par) ? "'" : "not a string",
                        cJSON_IsString(par) ? par->valuestring : "",
                        cJSON_IsString(par) ? "'" : "");
    HERD_TRY(bool_field(obj, "bias", &s->bias, origin, s->name));
    HERD_TRY(bool_field(obj, "per_position", &s->per_position, origin, s->name));
    if (s->stride == 0)
        s->stride = is_pool ? s->kernel : 1;
    return parse_inputs(obj, specs, i, origin);
}

herd_status herd_model_parse_text(const char *text, const char *origin, int classes,
                                  herd_layer_spec **specs_out, int *n_out)
{
    char *copy = strdup(text);
    if (!copy)
        return HERD_NOMEM(strlen(text));
    const char *unclosed = blank_comments(copy);
    const char *end = NULL;
    cJSON *root = unclosed ? NULL : cJSON_ParseWithOpts(copy, &end, 0);
    herd_status st = HERD_OK;
    herd_layer_spec *specs = NULL;
    if (unclosed) {
        int line, col;
        line_col(copy, unclosed, &line, &col);
        st = HERD_ERR(HERD_ERR_FORMAT, "%s:%d:%d: a comment ('/*') that never ends: close it "
                      "with '*/'", origin, line, col);
        goto done;
    }
    if (!root) {
        int line, col;
        line_col(copy, cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : copy, &line, &col);
        st = HERD_ERR(HERD_ERR_FORMAT, "%s:%d:%d: invalid JSON in model file", origin, line, col);
        goto done;
    }
    end += strspn(end, " \t\r\n");
    if (*end) {
        int line, col, shown = (int)strcspn(end, "\r\n");
        line_col(copy, end, &line, &col);
        st = HERD_ERR(HERD_ERR_FORMAT, "%s:%d:%d: text after the end of the model's JSON object "
                      "(starting '%.*s'); remove it or merge it into the object", origin, line, col,
                      shown < 16 ? shown : 16, end);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: a model file is a JSON object with a \"layers\" list",
                      origin);
        goto done;
    }
    if (duplicate_key(root)) {
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: top-level key \"%s\" is given twice", origin,
                      duplicate_key(root));
        goto done;
    }
    for (const cJSON *it = root->child; it; it = it->next) {
        static const char *const top_keys[] = {"name", "description", "layers", NULL};
        if (!in_list(top_keys, it->string)) {
            st = HERD_ERR(HERD_ERR_FORMAT, "%s: unknown top-level key \"%s\" (a model file has "
                          "\"name\", \"description\" and \"layers\")", origin, it->string);
            goto done;
        }
    }
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    int n = cJSON_IsArray(layers) ? cJSON_GetArraySize(layers) : 0;
    if (n == 0) {
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: a model file needs a non-empty \"layers\" list", origin);
        goto done;
    }
    specs = herd_xcalloc((size_t)n, sizeof *specs);
    if (!specs) {
        st = HERD_ERR_NOMEM;
        goto done;
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, layers)
    {
        st = parse_layer(it, specs, i++, classes, origin);
        if (st != HERD_OK)
            goto done;
    }
    *specs_out = specs;
    *n_out = n;
    specs = NULL;
done:
    free(specs);
    cJSON_Delete(root);
    free(copy);
    return st;
}

void herd_model_text_field(const char *text, const char *key, const char *fallback, char *out,
                           size_t len)
{
    snprintf(out, len, "%s", fallback);
    char *copy = strdup(text);
    if (!copy)
        return;
    blank_comments(copy);
    cJSON *root = cJSON_Parse(copy);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsString(v))
        snprintf(out, len, "%s", v->valuestring);
    cJSON_Delete(root);
    free(copy);
}

herd_status herd_model_parse(const char *name_or_path, int classes, herd_layer_spec **specs,
                             int *n_specs, char *model_name, size_t name_len)
{
    const char *zoo = herd_zoo_text(name_or_path);
    if (zoo) {
        herd_model_text_field(zoo, "name", name_or_path, model_name, name_len);
        return herd_model_parse_text(zoo, name_or_path, classes, specs, n_specs);
    }
    char *text = NULL;
    HERD_TRY(herd_read_text(name_or_path, "model file",
                            "give a zoo name (herd models) or the path of a model file", &text));
    herd_model_text_field(text, "name", name_or_path, model_name, name_len);
    herd_status st = herd_model_parse_text(text, name_or_path, classes, specs, n_specs);
    free(text);
    return st;
}

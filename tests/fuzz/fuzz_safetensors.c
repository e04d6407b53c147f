/* safetensors, header and data. An accepted file is checked against an independent
 * reading of its header (cJSON): every tensor of the header is there with its dtype
 * F32, its shape (each dimension >= 0, at most 4, the element count not overflowing)
 * and its data_offsets; the tensors tile the data section exactly (sorted by offset,
 * each begins where the previous ends, the last ends at the end of the file); each
 * tensor's floats are the bytes of its range; __metadata__ values are strings. */
#include <cjson/cJSON.h>

#include "core/safetensors.h"
#include "fuzz.h"

typedef struct range { size_t b, e; } range;

static int by_begin(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b ? 1 : (x->e > y->e) - (x->e < y->e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fz_path(path, sizeof path, "model.safetensors");
    fz_write(path, data, size);
    herd_st_file *f = NULL;
    if (herd_safetensors_read(path, &f) != HERD_OK)
        return 0;
    FZ_CHECK(size >= 8, "accepted %zu bytes", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | data[i];
    FZ_CHECK(hlen <= size - 8, "header length %llu beyond the file", (unsigned long long)hlen);
    size_t data_len = size - 8 - (size_t)hlen;
    const uint8_t *sec = data + 8 + hlen;
    cJSON *root = cJSON_ParseWithLength((const char *)data + 8, (size_t)hlen);
    FZ_CHECK(cJSON_IsObject(root), "the header is not a JSON object");
    size_t n = herd_st_count(f), seen = 0;
    range *r = calloc(n + 1, sizeof *r);
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        if (strcmp(item->string, "__metadata__") == 0) {
            const cJSON *kv;
            cJSON_ArrayForEach(kv, item)
            {
                FZ_CHECK(cJSON_IsString(kv), "metadata '%s' is not a string", kv->string);
                const char *v = herd_st_meta(f, kv->string);
                FZ_CHECK(v && strcmp(v, kv->valuestring) == 0, "metadata '%s' differs", kv->string);
            }
            continue;
        }
        int ndim = -1;
        int64_t shape[4];
        const float *t = herd_st_find(f, item->string, &ndim, shape);
        FZ_CHECK(t != NULL, "tensor '%s' of the header is missing", item->string);
        FZ_CHECK(seen < n, "more tensors in the header than read");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
        FZ_CHECK(cJSON_IsString(dt) && strcmp(dt->valuestring, "F32") == 0, "tensor '%s' not F32",
                 item->string);
        FZ_CHECK(cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == ndim && ndim >= 0 && ndim <= 4,
                 "tensor '%s': ndim %d", item->string, ndim);
        size_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            const cJSON *v = cJSON_GetArrayItem(sh, d);
            FZ_CHECK(cJSON_IsNumber(v) && v->valuedouble == (double)shape[d] && shape[d] >= 0,
                     "tensor '%s': dimension %d is %lld", item->string, d, (long long)shape[d]);
            FZ_CHECK(shape[d] == 0 || numel <= SIZE_MAX / 4 / (size_t)shape[d], "tensor '%s' overflows",
                     item->string);
            numel *= (size_t)shape[d];
        }
        FZ_CHECK(cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2, "tensor '%s': offsets", item->string);
        double b = cJSON_GetArrayItem(off, 0)->valuedouble, e = cJSON_GetArrayItem(off, 1)->valuedouble;
        FZ_CHECK(b >= 0 && e >= b && e <= (double)data_len && b == (double)(size_t)b && e == (double)(size_t)e,
                 "tensor '%s': offsets %g..%g in %zu bytes", item->string, b, e, data_len);
        r[seen] = (range){(size_t)b, (size_t)e};
        FZ_CHECK(r[seen].e - r[seen].b == numel * 4, "tensor '%s': %zu bytes for %zu floats", item->string,
                 r[seen].e - r[seen].b, numel);
        FZ_CHECK(numel == 0 || memcmp(t, sec + r[seen].b, numel * 4) == 0, "tensor '%s': data differs",
                 item->string);
        seen++;
    }
    FZ_CHECK(seen == n, "%zu tensors in the header, %zu read", seen, n);
    qsort(r, n, sizeof *r, by_begin);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        FZ_CHECK(r[i].b == at, "a tensor begins at %zu, expected %zu: a gap or an overlap", r[i].b, at);
        at = r[i].e;
    }
    FZ_CHECK(at == data_len, "the tensors end at %zu of a %zu-byte data section", at, data_len);
    for (size_t i = 0; i < n; i++)
        FZ_CHECK(herd_st_name(f, i) && herd_st_find(f, herd_st_name(f, i), NULL, NULL), "name %zu", i);
    free(r);
    cJSON_Delete(root);
    herd_st_free(f);
    return 0;
}

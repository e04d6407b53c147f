/* Model files (JSON with comments, src/nn/modelfile.c). Input: a byte choosing the
 * input shape (1x28x28, 3x32x32, 1x8x8 or 3x8x8), then the file's text. An accepted
 * file must plan on that shape or fail with an error; a planned model has positive
 * layer shapes without int overflow, views tiling the parameter and buffer storage,
 * and the last layer giving the classes. When small enough (<= 1M parameters,
 * <= 4 MFLOP a sample) it is built and its forward pass runs on a batch of 2, giving
 * finite logits. */
#include <math.h>

#include "fuzz.h"
#include "nn/model.h"

static const int shapes[4][3] = {{1, 28, 28}, {3, 32, 32}, {1, 8, 8}, {3, 8, 8}};

static void check_layout(const herd_model *m)
{
    FZ_CHECK(m->n_layers > 0, "no layer");
    for (int i = 0; i < m->n_layers; i++) {
        herd_shape s = m->layers[i].out_shape;
        FZ_CHECK(s.c > 0 && s.h > 0 && s.w > 0, "layer %d gives %dx%dx%d", i, s.c, s.h, s.w);
        FZ_CHECK((int64_t)s.c * s.h * s.w <= INT32_MAX, "layer %d: %d*%d*%d overflows int", i, s.c, s.h, s.w);
    }
    herd_shape last = m->layers[m->n_layers - 1].out_shape;
    FZ_CHECK(last.c * last.h * last.w == m->classes, "the last layer gives %dx%dx%d for %d classes", last.c,
             last.h, last.w, m->classes);
    size_t at[2] = {0, 0};
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *t = &m->views[v];
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            FZ_CHECK(t->shape[d] > 0, "view %s dim %d is %lld", t->name, d, (long long)t->shape[d]);
            numel *= (size_t)t->shape[d];
        }
        FZ_CHECK(numel == t->numel, "view %s: numel %zu, shape says %zu", t->name, t->numel, numel);
        int b = t->is_buffer != 0;
        FZ_CHECK(t->offset == at[b], "view %s at %zu, expected %zu", t->name, t->offset, at[b]);
        at[b] += t->numel;
    }
    FZ_CHECK(at[0] == m->n_param_floats && at[1] == m->n_buffer_floats, "views cover %zu + %zu of %zu + %zu",
             at[0], at[1], m->n_param_floats, m->n_buffer_floats);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    const int *in = shapes[data[0] & 3];
    char *text = fz_strndup(data + 1, size - 1);
    herd_layer_spec *specs = NULL;
    int n = 0;
    herd_status st = herd_model_parse_text(text, "fuzz.json", 10, &specs, &n);
    free(text);
    if (st != HERD_OK) {
        free(specs);
        return 0;
    }
    FZ_CHECK(n > 0 && specs, "accepted with %d layers", n);
    herd_model *plan = calloc(1, sizeof *plan);
    plan->in_c = in[0], plan->in_h = in[1], plan->in_w = in[2], plan->classes = 10;
    bool small = false;
    if (herd_model_plan(plan, specs, n) == HERD_OK) {
        check_layout(plan);
        double flops = herd_model_flops_per_sample(plan);
        FZ_CHECK(isfinite(flops) && flops >= 0, "flops %g", flops);
        small = plan->n_param_floats + plan->n_buffer_floats <= (1u << 20) && flops <= 4e6;
    }
    herd_model_free(plan);
    if (small) {
        herd_model *m = calloc(1, sizeof *m);
        m->in_c = in[0], m->in_h = in[1], m->in_w = in[2], m->classes = 10;
        FZ_CHECK(herd_model_build(m, specs, n, 1) == HERD_OK, "planned but does not build: %s",
                 herd_last_error());
        check_layout(m);
        FZ_CHECK(herd_model_reshape(m, 2) == HERD_OK, "reshape: %s", herd_last_error());
        size_t xn = 2 * (size_t)in[0] * in[1] * in[2];
        float *x = malloc(xn * sizeof *x);
        for (size_t i = 0; i < xn; i++)
            x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
        herd_run_ctx ctx = herd_model_ctx(m, false, 1);
        const float *logits = NULL;
        FZ_CHECK(herd_model_forward(m, &ctx, x, &logits) == HERD_OK, "forward: %s", herd_last_error());
        for (int i = 0; i < 2 * 10; i++)
            FZ_CHECK(isfinite(logits[i]), "logit %d is %g", i, logits[i]);
        free(x);
        herd_model_free(m);
    }
    free(specs);
    return 0;
}

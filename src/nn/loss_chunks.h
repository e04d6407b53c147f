/*
 * The last layer in chunks of samples (--loss-chunk): a language model's logits are its
 * largest activation (gpt2 at 4 x 1,024 tokens: 0.8 GiB, vocabulary 50,257 against a
 * width of 768), and nothing but the loss reads them. With a chunk of N samples the
 * model holds N samples' logits: the trainer runs every layer but the last over the
 * batch, then for each chunk the last layer's forward, the loss (its gradient written
 * over the chunk's logits where it may be) and at once the last layer's backward, which
 * adds the chunk's weight gradient and writes the chunk's rows of its input's gradient;
 * then the backward of the other layers as usual. The same arithmetic per row; the
 * weight gradient is summed chunk by chunk (under --deterministic each slice's exact
 * sum, so the same bits). The last layer must be a linear or lm_head layer reading fp32
 * activations.
 */
#ifndef HERD_NN_LOSS_CHUNKS_H
#define HERD_NN_LOSS_CHUNKS_H

#include "nn/model.h"

/* Samples per chunk from the next reshape (0: the whole batch at once); an error naming
 * the last layer when it cannot run in chunks. Models built from m do not take it over
 * (a tensor-parallel part sets it itself). */
herd_status herd_model_set_loss_chunk(herd_model *m, int samples);
/* Whether the last layer runs in chunks at the current batch, and their size. */
bool herd_model_head_chunked(const herd_model *m);
int herd_model_head_chunk(const herd_model *m);
/* Every layer's forward but the last's (herd_model_forward, one layer short). */
herd_status herd_model_forward_body(herd_model *m, const herd_run_ctx *ctx, const float *x);
/* The last layer's forward over samples first..first+n-1 (n at most the chunk): their
 * logits (n x classes) in *logits, the chunk's own buffer. */
herd_status herd_model_head_forward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                    int first, int n, const float **logits);
/* Its backward for the same samples, after herd_model_backward_begin: dlogits the
 * chunk's; the weight gradient added to (accumulate) or written as ctx's grad_beta says
 * (the first chunk). last: the batch's last chunk, after which the layer's backward is
 * done (the after_backward hook runs). */
herd_status herd_model_head_backward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                     int first, int n, const float *dlogits, bool accumulate,
                                     bool last);
/* The backward of every layer but the last, after the chunks. */
herd_status herd_model_backward_body(herd_model *m, const herd_run_ctx *ctx, const float *x);

#endif

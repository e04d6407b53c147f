/* herd models: the zoo with parameter counts and FLOPs per sample. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_models(int argc, char **argv)
{
    int c = 1, h = 28, w = 28, classes = 10;
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: herd models [--cifar]\n\nLists the zoo for 1x28x28 input (Fashion-MNIST), "
               "or 3x32x32 with --cifar.\nFLOPs count one multiply-add as 2, forward pass, per "
               "sample; a training step costs about 3x. Language models read a sequence of their\n"
               "context: their FLOPs per sample are per sequence, and MFLOPs/token divides by it.\n");
        return CLI_OK;
    }
    if (argc > 1 && strcmp(argv[1], "--cifar") == 0)
        c = 3, h = w = 32;
    else if (argc > 1)
        return cli_usage_error("models", "unexpected argument '%s'", argv[1]);
    printf("%-10s %12s %14s %13s  %s\n", "model", "params", "MFLOPs/sample", "MFLOPs/token",
           "description");
    for (size_t i = 0; herd_zoo_name(i); i++) {
        herd_model *m;
        int context, vocab;
        herd_status st = herd_model_token_shape(herd_zoo_name(i), &context, &vocab);
        if (st == HERD_OK && context > 0) /* a language model: its own context and vocabulary */
            st = herd_model_create_shape_plan(herd_zoo_name(i), 1, context, 1, vocab, &m);
        else if (st == HERD_OK)
            st = herd_model_create_shape_plan(herd_zoo_name(i), c, h, w, classes, &m);
        if (st != HERD_OK)
            return cli_fail(st, herd_zoo_name(i));
        double flops = herd_model_flops_per_sample(m);
        char per_token[32] = "-";
        if (context > 0)
            snprintf(per_token, sizeof per_token, "%.2f", flops / context / 1e6);
        printf("%-10s %12zu %14.2f %13s  %s\n", herd_zoo_name(i), herd_model_param_count(m),
               flops / 1e6, per_token, herd_zoo_description(i));
        herd_model_free(m);
    }
    printf("(input %dx%dx%d, %d classes; language models: a sample is a sequence of their "
           "context)\n", c, h, w, classes);
    return CLI_OK;
}

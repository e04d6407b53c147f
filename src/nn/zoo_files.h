/* The model files of models/, embedded at build time (scripts/embed_models.cmake). */
#ifndef HERD_NN_ZOO_FILES_H
#define HERD_NN_ZOO_FILES_H

struct herd_zoo_file {
    const char *name;
    const char *text;
};
extern const struct herd_zoo_file herd_zoo_files[]; /* ends with {NULL, NULL} */

#endif

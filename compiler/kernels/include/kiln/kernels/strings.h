/* Parameters of the string kernels: string_normalizer (StringNormalizer) and its shape
 * function shape_string_normalizer. The stopwords travel as input 1, a u8 constant of
 * NUL-terminated words (params hold no strings). */
#ifndef KILN_KERNELS_STRINGS_H_
#define KILN_KERNELS_STRINGS_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kiln_case_change { KILN_CASE_NONE = 0, KILN_CASE_LOWER = 1, KILN_CASE_UPPER = 2 };

typedef struct kiln_string_params {
  int64_t case_change;    /* kiln_case_change, ASCII letters only */
  int64_t case_sensitive; /* 0: stopwords compare ignoring ASCII case */
  int64_t num_stopwords;  /* words in input 1 */
} kiln_string_params;
KILN_PARAMS_LAYOUT(kiln_string_params, 3);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_STRINGS_H_ */

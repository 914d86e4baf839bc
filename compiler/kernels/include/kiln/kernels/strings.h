/* Parameters of the string kernels: string_normalizer (StringNormalizer) and its shape
 * function shape_string_normalizer, string_split (StringSplit) and shape_string_split, and
 * the program regex_full_match (RegexFullMatch) runs. Params hold no strings: the stopwords
 * travel as input 1, a u8 constant of NUL-terminated words; StringSplit's delimiter as
 * input 1, a u8 constant of the NUL-terminated delimiter. */
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

/* StringSplit: at most maxsplit splits per element (negative: no limit); an empty
 * delimiter splits on runs of spaces, as ONNX Runtime does. */
typedef struct kiln_string_split_params {
  int64_t maxsplit;
} kiln_string_split_params;
KILN_PARAMS_LAYOUT(kiln_string_split_params, 1);

/* RegexFullMatch's pattern, compiled by compiler/ops (regex_program.cc) into a Thompson NFA
 * that regex_full_match simulates over the text's code points: input 1, an i32 constant
 *   [0]                      instruction count N
 *   [1 + 3 * pc ...]         instruction pc: op, a, b (kiln_regex_op)
 *   [1 + 3 * N ...]          the character classes' ranges, pairs lo, hi (inclusive)
 * Execution starts at pc 0. A text matches when a thread reaches KILN_REGEX_MATCH with the
 * whole text consumed. */
enum kiln_regex_op {
  KILN_REGEX_MATCH = 0,  /* accept */
  KILN_REGEX_CHAR = 1,   /* code point a, then pc + 1 */
  KILN_REGEX_CLASS = 2,  /* a code point in one of the b ranges at word a, then pc + 1 */
  KILN_REGEX_SPLIT = 3,  /* go on at both a and b */
  KILN_REGEX_JUMP = 4,   /* go on at a */
  KILN_REGEX_ASSERT = 5, /* empty-width kiln_regex_assertion a holds, then pc + 1 */
};
enum kiln_regex_assertion {
  KILN_REGEX_BEGIN_TEXT = 0,
  KILN_REGEX_END_TEXT = 1,
  KILN_REGEX_BEGIN_LINE = 2,    /* at the start or after a newline */
  KILN_REGEX_END_LINE = 3,      /* at the end or before a newline */
  KILN_REGEX_WORD_BOUNDARY = 4, /* ASCII word characters [0-9A-Za-z_] on one side only */
  KILN_REGEX_NOT_WORD_BOUNDARY = 5,
};
/* The kernel keeps its thread lists on the stack: programs are at most this long. */
#define KILN_REGEX_MAX_INSTRUCTIONS 2048

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_STRINGS_H_ */

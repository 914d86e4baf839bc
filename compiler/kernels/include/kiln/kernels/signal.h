/* Parameters of the signal kernels (kernels/signal/signal.cc): dft (DFT), stft (STFT),
 * mel_weight_matrix, max_unpool, tfidf_vectorizer, and the shape functions of the first
 * four (shape_dft, shape_stft, shape_mel_weight_matrix, shape_max_unpool, which read
 * kiln_shape_params). Extents come from the tensors, not from here. */
#ifndef KILN_KERNELS_SIGNAL_H_
#define KILN_KERNELS_SIGNAL_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* DFT and STFT. Input 0 is real ([..., 1]) or complex ([..., 2]); the output is complex. */
typedef struct kiln_signal_params {
  int64_t axis;       /* dft: the transformed axis of input 0, normalised (>= 0) */
  int64_t inverse;    /* dft: 1 for the inverse transform (scaled by 1 / length) */
  int64_t onesided;   /* only the first length / 2 + 1 frequencies */
  int64_t has_length; /* dft: input 1 (dft_length) given; stft: input 3 (frame_length) given */
  int64_t has_window; /* stft: input 2 (window) given */
} kiln_signal_params;
KILN_PARAMS_LAYOUT(kiln_signal_params, 5);

/* Shape-function flags (kiln_shape_params.flags) of the signal family. */
enum kiln_signal_shape_flags {
  KILN_SIGNAL_ONESIDED = 1,   /* shape_dft, shape_stft */
  KILN_SIGNAL_HAS_LENGTH = 2, /* shape_dft: input 1; shape_stft: input 3 */
  KILN_SIGNAL_HAS_WINDOW = 4, /* shape_stft: input 2 */
  KILN_SIGNAL_FROM_INPUT = 8, /* shape_max_unpool: the output shape is input 2's data */
};

/* MaxUnpool: the window that made the indices. They index the unpooled tensor of the
 * default shape (N, C, (in - 1) * stride + kernel - pads); a larger output_shape holds
 * that tensor at its origin. */
typedef struct kiln_unpool_params {
  int64_t num_spatial;
  int64_t kernel[4];
  int64_t strides[4];
  int64_t pads[8]; /* begins, then ends */
} kiln_unpool_params;
KILN_PARAMS_LAYOUT(kiln_unpool_params, 17);

enum kiln_tfidf_mode { KILN_TFIDF_TF = 0, KILN_TFIDF_IDF = 1, KILN_TFIDF_TFIDF = 2 };

/* TfIdfVectorizer: inputs X (i32 or i64, [C] or [N, C]), then the pool (i64), the pool's
 * ngram_counts (i64), ngram_indexes (i64) and weights (f64, empty for none) as constants. */
typedef struct kiln_tfidf_params {
  int64_t mode; /* kiln_tfidf_mode */
  int64_t min_gram_length;
  int64_t max_gram_length;
  int64_t max_skip_count;
} kiln_tfidf_params;
KILN_PARAMS_LAYOUT(kiln_tfidf_params, 4);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_SIGNAL_H_ */

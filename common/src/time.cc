// Wall-clock time: see time.h.
#include "kiln/common/time.h"

namespace kiln {

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace kiln

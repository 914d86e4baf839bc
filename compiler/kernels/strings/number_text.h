// Exact conversions between binary floats and decimal text, for Cast to and from strings.
// Freestanding (no strtod or printf: the kernel library links libm only, and a process's
// locale must not change a number's text). Both directions compute with a small big
// integer, so text parses to the nearest float (ties to even) and a float prints as the
// fewest significant digits that parse back to it, laid out as numpy's str() does.
#pragma once

#include <math.h>
#include <stdint.h>

namespace kiln_kernels::text {

// A binary float format: significand bits (the hidden one included), the exponent of the
// smallest subnormal's unit, and the largest exponent (finite values are below 2^(max+1)).
struct FloatFormat {
  int32_t precision;
  int32_t min_unit_exponent;
  int32_t max_exponent;
};
inline constexpr FloatFormat kF32Format{24, -149, 127};
inline constexpr FloatFormat kF64Format{53, -1074, 1023};
inline constexpr FloatFormat kF16Format{11, -24, 15};
inline constexpr FloatFormat kBF16Format{8, -133, 127};

// Significant digits parsing keeps exactly (beyond them only "more" is kept): enough for
// every tie between two doubles, whose decimal expansions have at most 767 digits.
inline constexpr int32_t kMaxParsedDigits = 780;

// A non-negative integer of up to kWords 32-bit words, least significant first. Sized for
// a double's subnormal written out exactly (53 + 2.33 * 1074 bits) and for parsing's
// scaled values (3.33 * kMaxParsedDigits + ~1140 bits).
class BigInt {
 public:
  static constexpr int kWords = 160;
  explicit BigInt(uint64_t v) {
    words_[0] = static_cast<uint32_t>(v);
    words_[1] = static_cast<uint32_t>(v >> 32);
    size_ = words_[1] != 0 ? 2 : words_[0] != 0 ? 1 : 0;
  }
  bool IsZero() const { return size_ == 0; }
  void AddSmall(uint32_t v) {
    uint64_t carry = v;
    for (int i = 0; i < size_ && carry != 0; ++i) {
      const uint64_t sum = static_cast<uint64_t>(words_[i]) + carry;
      words_[i] = static_cast<uint32_t>(sum);
      carry = sum >> 32;
    }
    if (carry != 0 && size_ < kWords) words_[size_++] = static_cast<uint32_t>(carry);
  }
  void MulSmall(uint32_t factor) {
    uint64_t carry = 0;
    for (int i = 0; i < size_; ++i) {
      const uint64_t product = static_cast<uint64_t>(words_[i]) * factor + carry;
      words_[i] = static_cast<uint32_t>(product);
      carry = product >> 32;
    }
    if (carry != 0 && size_ < kWords) words_[size_++] = static_cast<uint32_t>(carry);
  }
  // Divides in place; returns the remainder.
  uint32_t DivSmall(uint32_t divisor) {
    uint64_t rest = 0;
    for (int i = size_ - 1; i >= 0; --i) {
      const uint64_t part = (rest << 32) | words_[i];
      words_[i] = static_cast<uint32_t>(part / divisor);
      rest = part % divisor;
    }
    Trim();
    return static_cast<uint32_t>(rest);
  }
  void ShiftLeft(int bits) {
    const int whole = bits / 32, part = bits % 32;
    if (size_ == 0 || bits <= 0) return;
    int size = size_ + whole + 1;
    if (size > kWords) size = kWords;
    for (int i = size - 1; i >= 0; --i) {
      const int from = i - whole;
      const uint32_t high = from >= 0 && from < size_ ? words_[from] : 0;
      const uint32_t low = from - 1 >= 0 && from - 1 < size_ ? words_[from - 1] : 0;
      words_[i] = part == 0 ? high : (high << part) | (low >> (32 - part));
    }
    size_ = size;
    Trim();
  }
  // Shifts right; returns whether a 1 bit fell off.
  bool ShiftRight(int bits) {
    if (bits <= 0) return false;
    const int whole = bits / 32, part = bits % 32;
    bool lost = false;
    for (int i = 0; i < whole && i < size_; ++i) lost = lost || words_[i] != 0;
    if (part != 0 && whole < size_) lost = lost || (words_[whole] & ((1u << part) - 1)) != 0;
    for (int i = 0; i < size_; ++i) {
      const int from = i + whole;
      const uint32_t low = from < size_ ? words_[from] : 0;
      const uint32_t high = from + 1 < size_ ? words_[from + 1] : 0;
      words_[i] = part == 0 ? low : (low >> part) | (high << (32 - part));
    }
    size_ = size_ > whole ? size_ - whole : 0;
    Trim();
    return lost;
  }
  int BitLength() const {
    if (size_ == 0) return 0;
    return (size_ - 1) * 32 + (32 - __builtin_clz(words_[size_ - 1]));
  }
  uint64_t Low64() const {
    return (size_ > 0 ? words_[0] : 0) | (static_cast<uint64_t>(size_ > 1 ? words_[1] : 0) << 32);
  }

 private:
  void Trim() {
    while (size_ > 0 && words_[size_ - 1] == 0) --size_;
  }
  uint32_t words_[kWords] = {};
  int size_ = 0;
};

inline constexpr uint32_t kPow10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

// digits * 10^exp10 (plus a little more when `more`: nonzero digits were dropped) rounded
// to the nearest value of `format` (ties to even), as a double (exact: every such value is
// one); HUGE_VAL past the largest.
inline double DecimalToFloat(const BigInt& digits, int32_t exp10, bool more, const FloatFormat& format) {
  if (digits.IsZero()) return 0;
  const int digit_bits = digits.BitLength();
  const double log2_value = (digit_bits - 1) + exp10 * 3.321928094887362;
  if (log2_value > format.max_exponent + 2) return HUGE_VAL;
  if (log2_value < format.min_unit_exponent - 2) return 0;
  // q = floor(value * 2^scale) with a few bits more than the significand and a round bit.
  const int scale = format.precision + 4 - static_cast<int>(floor(log2_value));
  BigInt q = digits;
  bool inexact = more;
  for (int32_t k = exp10; k > 0; k -= 9) q.MulSmall(kPow10[k >= 9 ? 9 : k]);
  if (scale > 0) q.ShiftLeft(scale);
  for (int32_t k = -exp10; k > 0; k -= 9) inexact = q.DivSmall(kPow10[k >= 9 ? 9 : k]) != 0 || inexact;
  if (scale < 0) inexact = q.ShiftRight(-scale) || inexact;
  // Keep precision + 1 bits (fewer for a subnormal): the significand and the round bit.
  int shift = q.BitLength() - (format.precision + 1);
  if (shift < format.min_unit_exponent - 1 + scale) shift = format.min_unit_exponent - 1 + scale;
  if (shift > 0) inexact = q.ShiftRight(shift) || inexact;
  int32_t unit = shift - scale + 1;  // the exponent of the significand's last bit
  uint64_t significand = q.Low64() >> 1;
  if ((q.Low64() & 1) != 0 && (inexact || (significand & 1) != 0)) ++significand;
  if (significand == (uint64_t{1} << format.precision)) {
    significand >>= 1;
    ++unit;
  }
  if (significand == 0) return 0;
  if (64 - __builtin_clzll(significand) - 1 + unit > format.max_exponent) return HUGE_VAL;
  return ldexp(static_cast<double>(significand), unit);
}

// Text to a number of `format` by ONNX's rule: optional sign, digits with an optional point
// and exponent ("1e-5", "1E8", ".5"), or "INF", "+INF", "-INF", "NaN" in any case; the
// whole text must be the number. Returns false for anything else.
inline bool ParseNumber(const char* s, const FloatFormat& format, double* out) {
  auto upper = [](char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; };
  auto is = [&](const char* p, const char* word) {
    for (; *word != 0; ++p, ++word) {
      if (upper(*p) != *word) return false;
    }
    return *p == 0;
  };
  if (is(s, "NAN")) {
    *out = NAN;
    return true;
  }
  const bool negative = *s == '-';
  if (*s == '-' || *s == '+') ++s;
  if (is(s, "INF")) {
    *out = negative ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  BigInt digits(0);
  int32_t kept = 0, exp10 = 0;
  bool more = false, any = false, point = false;
  for (;; ++s) {
    if (*s == '.' && !point) {
      point = true;
      continue;
    }
    if (*s < '0' || *s > '9') break;
    any = true;
    const int d = *s - '0';
    if (kept < kMaxParsedDigits && (kept > 0 || d != 0)) {
      digits.MulSmall(10);
      digits.AddSmall(static_cast<uint32_t>(d));
      ++kept;
      if (point) --exp10;
    } else if (kept >= kMaxParsedDigits) {
      more = more || d != 0;
      if (!point) ++exp10;
    } else if (point) {
      --exp10;  // a leading zero after the point
    }
  }
  if (!any) return false;
  if (*s == 'e' || *s == 'E') {
    ++s;
    const bool minus = *s == '-';
    if (*s == '-' || *s == '+') ++s;
    if (*s < '0' || *s > '9') return false;
    int32_t e = 0;
    for (; *s >= '0' && *s <= '9'; ++s) e = e < 100000 ? e * 10 + (*s - '0') : e;
    exp10 += minus ? -e : e;
  }
  if (*s != 0) return false;
  const double magnitude = DecimalToFloat(digits, exp10, more, format);
  *out = negative ? -magnitude : magnitude;
  return true;
}

// Writes `n` in decimal at `out`; returns the end.
inline char* WriteUnsigned(uint64_t n, char* out) {
  char reversed[24];
  int count = 0;
  do {
    reversed[count++] = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n != 0);
  while (count > 0) *out++ = reversed[--count];
  return out;
}

// The fewest significant digits that read back as `value` (finite, nonzero, positive) in
// `format`: digits as an integer, their count, and the exponent of the first digit.
struct ShortestDigits {
  uint64_t digits;
  int32_t count;
  int32_t exponent;
};

inline ShortestDigits Shortest(double value, const FloatFormat& format) {
  // value = m * 2^e exactly, written out in decimal: value = n * 10^decimal_exponent.
  int binary_exponent = 0;
  const double fraction = frexp(value, &binary_exponent);
  uint64_t m = static_cast<uint64_t>(ldexp(fraction, 53));
  int32_t e = binary_exponent - 53;
  while ((m & 1) == 0 && e < 0) {  // fewer digits to write out (a subnormal's stay < 800)
    m >>= 1;
    ++e;
  }
  BigInt n(m);
  int32_t decimal_exponent = 0;
  if (e >= 0) {
    n.ShiftLeft(e);
  } else {
    for (int32_t k = -e; k > 0; k -= 13) n.MulSmall(k >= 13 ? 1220703125u : static_cast<uint32_t>(pow(5, k)));
    decimal_exponent = e;
  }
  char exact[800];
  int32_t length = 0;
  while (!n.IsZero()) {  // nine digits at a time, least significant first
    uint32_t group = n.DivSmall(1000000000u);
    for (int i = 0; i < 9 && length < 800; ++i, group /= 10) exact[length++] = static_cast<char>('0' + group % 10);
  }
  while (length > 1 && exact[length - 1] == '0') --length;  // leading zeros (reversed)
  const int32_t first = length - 1 + decimal_exponent;      // exponent of the first digit
  auto digit = [&](int32_t i) { return i < length ? exact[length - 1 - i] - '0' : 0; };
  for (int32_t count = 1; count <= 17; ++count) {
    uint64_t d = 0;
    for (int32_t i = 0; i < count; ++i) d = d * 10 + static_cast<uint64_t>(digit(i));
    bool rest = false;
    for (int32_t i = count + 1; i < length; ++i) rest = rest || digit(i) != 0;
    const int next = digit(count);
    if (next > 5 || (next == 5 && (rest || (d & 1) != 0))) ++d;
    int32_t exponent = first;
    if (d == static_cast<uint64_t>(pow(10, count))) {
      d /= 10;
      ++exponent;
    }
    if (DecimalToFloat(BigInt(d), exponent - count + 1, false, format) == value) {
      int32_t kept = count;
      while (kept > 1 && d % 10 == 0) {
        d /= 10;
        --kept;
      }
      return ShortestDigits{d, kept, exponent};
    }
  }
  return ShortestDigits{0, 1, 0};  // not reached: 17 digits identify every double
}

// `value` as numpy's str() writes a float of `format`: positional for 1e-4 <= |x| < 1e16
// ("0.25", "100.0"), else scientific with a two-digit exponent at least ("1e-05",
// "1.5e+20"); "nan", "inf", "-inf", "0.0", "-0.0". Returns the end (at most 26 chars).
inline char* WriteFloat(double value, const FloatFormat& format, char* out) {
  auto put = [&](const char* s) {
    while (*s != 0) *out++ = *s++;
  };
  if (isnan(value)) {
    put("nan");
    return out;
  }
  if (signbit(value)) *out++ = '-';
  const double magnitude = fabs(value);
  if (isinf(magnitude)) {
    put("inf");
    return out;
  }
  if (magnitude == 0) {
    put("0.0");
    return out;
  }
  const ShortestDigits s = Shortest(magnitude, format);
  char digits[24];
  WriteUnsigned(s.digits, digits);
  if (magnitude >= 1e-4 && magnitude < 1e16) {
    if (s.exponent < 0) {
      put("0.");
      for (int32_t i = -1; i > s.exponent; --i) *out++ = '0';
      for (int32_t i = 0; i < s.count; ++i) *out++ = digits[i];
      return out;
    }
    for (int32_t i = 0; i <= s.exponent || i < s.count; ++i) {
      if (i == s.exponent + 1) *out++ = '.';
      *out++ = i < s.count ? digits[i] : '0';
    }
    if (s.count <= s.exponent + 1) put(".0");
    return out;
  }
  *out++ = digits[0];
  if (s.count > 1) {
    *out++ = '.';
    for (int32_t i = 1; i < s.count; ++i) *out++ = digits[i];
  }
  *out++ = 'e';
  *out++ = s.exponent < 0 ? '-' : '+';
  const int32_t e = s.exponent < 0 ? -s.exponent : s.exponent;
  if (e < 10) *out++ = '0';
  return WriteUnsigned(static_cast<uint64_t>(e), out);
}

}  // namespace kiln_kernels::text

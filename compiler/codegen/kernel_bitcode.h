// The kernel library's bitcode as the build embedded it in the compiler: one blob per
// kernel source (compiler/CMakeLists.txt). Private to compiler/codegen.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "llvm/ADT/StringRef.h"

namespace kiln::codegen {

struct EmbeddedBitcode {
  std::string stem;  // the source's name without extension: "elementwise", "quant", ...
  llvm::StringRef bytes;
};

const std::vector<EmbeddedBitcode>& KernelBitcode();

// Which blob defines each exported kernel (kiln_k_*) and scalar op (kiln_s_*), read once
// per process from the lazily loaded modules' symbol tables.
const std::map<std::string, size_t>& BitcodeSymbols();

// sha256 over every blob (and the library format's version): names the compiled
// libraries, so a changed kernel never links against a stale object.
const std::string& KernelBitcodeHash();

}  // namespace kiln::codegen

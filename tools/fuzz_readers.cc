// The fuzz target of libodla's stored-executable and bundle readers (tools/fuzz_readers.py
// builds it from libodla's sources, with AddressSanitizer and UndefinedBehaviorSanitizer):
// reads one path a line from stdin, parses it (a folder as a bundle, anything else as a
// stored executable) and answers one line: "ok", or "refused <ODLA status>". It never loads
// a library: what it tries is the reader alone. A crash, a sanitizer report or a missing
// answer is a finding.
#include <iostream>
#include <string>

#include <sys/stat.h>

#include "stored_executable.h"

int main() {
  std::ios::sync_with_stdio(false);
  for (std::string path; std::getline(std::cin, path);) {
    try {
      struct stat info;
      if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
        odla_tvm::ParseBundle(path, true, true);
      } else {
        std::shared_ptr<const odla_tvm::MappedFile> file = odla_tvm::MappedFile::Open(path);
        if (!file) throw odla_tvm::Error(ODLA_FILE_NOT_EXIST, path + " is missing");
        odla_tvm::ParseStoredExecutable(file->bytes(), path);
      }
      std::cout << "ok" << std::endl;
    } catch (const odla_tvm::Error& e) {
      std::cout << "refused " << e.status << std::endl;
    }
  }
  return 0;
}

// MappedFile: mmap(2) of a whole file.
#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "internal.h"

namespace odla_tvm {

std::shared_ptr<const MappedFile> MappedFile::Open(const std::string& path, bool populate) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return nullptr;
  }
  size_t size = static_cast<size_t>(info.st_size);
  void* data = size == 0 ? nullptr : mmap(nullptr, size, PROT_READ,
                                          MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
  int error = errno;
  close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED)
    throw Error(ODLA_MEM_ERROR, "cannot map " + path + ": " + std::strerror(error));
  return std::shared_ptr<const MappedFile>(new MappedFile(data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace odla_tvm

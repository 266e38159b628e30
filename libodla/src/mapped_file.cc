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
  return Map(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC), path, populate);
}

std::shared_ptr<const MappedFile> MappedFile::OpenBeneath(const std::string& root,
                                                          const std::string& name,
                                                          bool populate) {
  int dir = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t at = 0;
  for (size_t slash; dir >= 0 && (slash = name.find('/', at)) != std::string::npos;
       at = slash + 1) {
    int next = openat(dir, name.substr(at, slash - at).c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dir);
    dir = next;
  }
  if (dir < 0) return nullptr;
  int fd = openat(dir, name.c_str() + at, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  close(dir);
  return Map(fd, root + "/" + name, populate);
}

std::shared_ptr<const MappedFile> MappedFile::Map(int fd, const std::string& path,
                                                  bool populate) {
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

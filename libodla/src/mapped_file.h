// A file mapped read-only into memory (private to this process), unmapped with the last
// reference: a bundle's files are read, hashed and used where they lie, never copied.
#ifndef ODLA_TVM_MAPPED_FILE_H_
#define ODLA_TVM_MAPPED_FILE_H_

#include <memory>
#include <string>
#include <string_view>

namespace odla_tvm {

class MappedFile {
 public:
  // The regular file at `path` (a FIFO or device is opened without blocking and refused),
  // mapped (`populate`: read whole at once, for one who reads all
  // of it right away); NULL where there is none to open. Throws Error where it opens but
  // cannot be mapped.
  static std::shared_ptr<const MappedFile> Open(const std::string& path, bool populate = true);
  // The same for `name`, a relative path inside the folder `root`, reached without following
  // a symbolic link at any step (a bundle's file never leads out of it).
  static std::shared_ptr<const MappedFile> OpenBeneath(const std::string& root,
                                                       const std::string& name,
                                                       bool populate = true);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  static std::shared_ptr<const MappedFile> Map(int fd, const std::string& path, bool populate);
  void* data_;  // NULL for an empty file (nothing to map)
  size_t size_;
};

}  // namespace odla_tvm

#endif  // ODLA_TVM_MAPPED_FILE_H_

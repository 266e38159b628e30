// Packed weights kept between processes: a region packs each constant weight into the layout
// its primitive prefers on its first call, which in a small model is most of the first run.
// Where the loader of an engine-cache entry names the entry's folder (odla_keep_packed_weights),
// a weight mapped from a file of that folder is packed once and kept in its packed/ folder;
// later processes map the kept copy instead. A copy's name digests what it was packed from
// and for (the source file and offset, both layouts, oneDNN's version), so another machine's
// layout or another model's weights never match; one of the wrong size is packed again.
// Exported bundles name no folder (their files are checked against digests; these are not).
#pragma once

#include <dnnl.hpp>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace odla_onednn {
namespace {

// The file-backed mappings of the process (/proc/self/maps), read once by whoever needs them.
class FileMappings {
 public:
  // The file and offset mapped at ``address``, if a file under ``folder`` is.
  std::optional<std::pair<std::string, uint64_t>> find(const void* address,
                                                       const std::string& folder) {
    if (!read_) read();
    auto at = reinterpret_cast<uintptr_t>(address);
    for (const Mapping& m : mappings_)
      if (m.begin <= at && at < m.end && m.path.compare(0, folder.size(), folder) == 0)
        return std::make_pair(m.path, m.offset + (at - m.begin));
    return std::nullopt;
  }

 private:
  struct Mapping {
    uintptr_t begin, end;
    uint64_t offset;
    std::string path;
  };

  void read() {
    read_ = true;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      unsigned long long begin, end, offset;
      int path_at = 0;
      if (std::sscanf(line.c_str(), "%llx-%llx %*s %llx %*s %*s %n", &begin, &end, &offset,
                      &path_at) < 3 || path_at == 0 || line[path_at] != '/')
        continue;
      mappings_.push_back({static_cast<uintptr_t>(begin), static_cast<uintptr_t>(end), offset,
                           line.substr(path_at)});
    }
  }

  bool read_ = false;
  std::vector<Mapping> mappings_;
};

// What a region's packed copy of a weight reads: memory it owns, or a kept file mapped.
struct PackedCopy {
  void* source;  // the address it was packed from
  dnnl::memory packed;
  std::shared_ptr<void> mapping;  // unmaps a kept copy
};

class PackedStore {
 public:
  // Keeps packed weights of files under ``root`` in root/packed from now on (a folder that
  // does not resolve keeps nothing).
  void keep_in(const std::string& root) {
    // As /proc/self/maps names the files: absolute, links resolved.
    std::unique_ptr<char, decltype(&std::free)> real(realpath(root.c_str(), nullptr), std::free);
    std::lock_guard<std::mutex> lock(mutex_);
    root_ = real ? std::string(real.get()) + "/" : "";
  }

  // The copy of ``source`` packed as ``desc`` kept at ``path`` (kept_path's), mapped; none
  // where there is none of its size.
  static std::optional<PackedCopy> find(const std::string& path, const dnnl::memory& source,
                                        const dnnl::memory::desc& desc) {
    if (path.empty()) return std::nullopt;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    struct stat info;
    size_t size = desc.get_size();
    void* data = MAP_FAILED;
    if (fstat(fd, &info) == 0 && static_cast<size_t>(info.st_size) == size && size > 0)
      data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (data == MAP_FAILED) return std::nullopt;
    std::shared_ptr<void> mapping(data, [size](void* p) { munmap(p, size); });
    return PackedCopy{source.get_data_handle(), dnnl::memory(desc, source.get_engine(), data),
                      mapping};
  }

  // Keeps ``packed`` at ``path`` (kept_path's; written beside and renamed into place; a
  // folder that cannot be written keeps nothing).
  static void keep(const std::string& path, const dnnl::memory& packed) {
    if (path.empty()) return;
    mkdir(path.substr(0, path.rfind('/')).c_str(), 0755);
    std::string partial = path + "." + std::to_string(getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
    int fd = open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const char* data = static_cast<const char*>(packed.get_data_handle());
    size_t left = packed.get_desc().get_size();
    while (left > 0) {
      ssize_t written = write(fd, data, left);
      if (written <= 0) break;
      data += written;
      left -= static_cast<size_t>(written);
    }
    bool whole = left == 0;
    if (close(fd) != 0 || !whole || rename(partial.c_str(), path.c_str()) != 0)
      unlink(partial.c_str());
  }

  // Where the copy of ``source`` packed as ``desc`` is kept: root/packed/<digest>.bin for a
  // source mapped from a file under root, else "" (nothing is kept).
  std::string kept_path(const dnnl::memory& source, const dnnl::memory::desc& desc,
                        FileMappings& mappings) {
    std::string root;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      root = root_;
    }
    if (root.empty()) return "";
    auto file = mappings.find(source.get_data_handle(), root);
    if (!file) return "";
    uint64_t digest = 14695981039346656037ull;  // FNV-1a
    auto add = [&digest](const void* bytes, size_t size) {
      for (size_t i = 0; i < size; ++i) {
        digest ^= static_cast<const unsigned char*>(bytes)[i];
        digest *= 1099511628211ull;
      }
    };
    auto add_dims = [&add](const dnnl::memory::dims& dims) {
      add(dims.data(), dims.size() * sizeof(dims[0]));
      add("|", 1);
    };
    add(file->first.data(), file->first.size());
    add(&file->second, sizeof(file->second));
    for (const dnnl::memory::desc& d : {source.get_desc(), desc}) {
      auto type = d.get_data_type();
      auto kind = d.get_format_kind();
      add(&type, sizeof(type));
      add(&kind, sizeof(kind));
      add_dims(d.get_dims());
      add_dims(d.get_padded_dims());
      add_dims(d.get_strides());
      add_dims(d.get_inner_blks());
      add_dims(d.get_inner_idxs());
      size_t size = d.get_size();
      add(&size, sizeof(size));
    }
    const dnnl_version_t* version = dnnl_version();
    for (int part : {version->major, version->minor, version->patch}) add(&part, sizeof(part));
    add(version->hash, std::strlen(version->hash));
    char name[32];
    std::snprintf(name, sizeof(name), "%016llx.bin", static_cast<unsigned long long>(digest));
    return root + "packed/" + name;
  }

 private:
  std::mutex mutex_;
  std::string root_;  // with a trailing '/'; empty: nothing is kept
};

}  // namespace
}  // namespace odla_onednn

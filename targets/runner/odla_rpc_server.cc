// odla_rpc_server: a TVM RPC server for a board, on TVM's C++ runtime only (no Python, no
// compiler there), for tuning through a tracker (odla-tvm tune --rpc-tracker HOST:PORT
// --rpc-key KEY).
//
//   odla_rpc_server --tracker HOST:PORT --key KEY [--host ADDR] [--port P] [--port-end Q]
//                   [--custom-addr ADDR] [--work-dir DIR]
//
// Registers with the tracker under KEY as TVM's Python server does (python -m
// tvm.exec.rpc_server): the tracker magic, UPDATE_INFO, then PUT of a match key, and while
// no client comes a GET_PENDING_MATCHKEYS every 2 s (a new key when the old one was handed to
// a client that never came). A client's handshake must carry "client:<match key>"; each
// session is served by libtvm_runtime's RPC server loop in a forked process, in a directory
// of its own, and ended after the -timeout=N the client asked for.
//
// Trust: as with TVM's own server, whoever reaches the port and knows a match key runs native
// code here (it uploads a library and loads it). So it listens on 127.0.0.1 unless --host says
// otherwise: open it only on a network whose hosts may run code on this machine. A handshake
// must end within kHandshakeS (one stalled client cannot hold the accept loop), and a
// session's files stay in its directory (no absolute name, no "..", no symlink out).
//
// What a session can call besides the runtime's own (upload, download, remove and load_module
// find their files through workpath; time evaluator):
//   tvm.rpc.server.workpath      a file name -> its path in the session's directory
//   tvm.rpc.server.load_module   loads an uploaded shared library (linked where it was built)
//   tvm.contrib.random.random_fill_for_measure (and random_fill): inputs for a measurement,
//                                which the board's libtvm_runtime lacks (TVM builds it into
//                                libtvm_runtime_extra)
#include <arpa/inet.h>
#include <dlpack/dlpack.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tvm {
namespace runtime {
// Exported by libtvm_runtime (rpc_socket_impl.cc): serves one RPC session on a connected socket.
void RPCServerLoop(int sockfd);
}  // namespace runtime
}  // namespace tvm

namespace ffi = tvm::ffi;

namespace {

// TVM's RPC constants (python/tvm/rpc/base.py).
constexpr int32_t kRPCMagic = 0xff271;
constexpr int32_t kRPCSuccess = kRPCMagic + 0;
constexpr int32_t kRPCMismatch = kRPCMagic + 2;
constexpr int32_t kTrackerMagic = 0x2f271;
enum TrackerCode { kSuccess = 0, kPut = 3, kUpdateInfo = 5, kGetPendingMatchKeys = 7 };
constexpr int kPingPeriodS = 2;
constexpr int kUnmatchTimeoutS = 4;
constexpr int kHandshakeS = 5;

using Clock = std::chrono::steady_clock;

struct Options {
  std::string tracker_host, key, host = "127.0.0.1", custom_addr, work_dir;
  int tracker_port = 0, port = 9090, port_end = 9199;
};

void Log(const std::string& message) { std::printf("odla_rpc_server: %s\n", message.c_str()); }

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void SendAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// Waits until `fd` has data, or throws once `deadline` has passed.
void AwaitData(int fd, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) throw std::runtime_error("the handshake passed its deadline");
    pollfd p{fd, POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready > 0) return;
    if (ready < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") +
                                                              std::strerror(errno));
  }
}

// Receives `size` bytes; with a deadline, all of them by then (not each recv: a client
// sending a byte at a time would hold the server).
void RecvAll(int fd, void* data, size_t size, std::optional<Clock::time_point> deadline = {}) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    if (deadline) AwaitData(fd, *deadline);
    ssize_t n = recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) throw std::runtime_error("the peer closed the connection");
    if (n < 0) throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

int32_t RecvInt(int fd, std::optional<Clock::time_point> deadline = {}) {
  int32_t value;
  RecvAll(fd, &value, sizeof(value), deadline);  // little-endian on both ends, as TVM assumes
  return value;
}

void SendInt(int fd, int32_t value) { SendAll(fd, &value, sizeof(value)); }

// The tracker's messages: a length, then that many bytes of JSON.
void SendJson(int fd, const std::string& json) {
  SendInt(fd, static_cast<int32_t>(json.size()));
  SendAll(fd, json.data(), json.size());
}

std::string RecvJson(int fd) {
  int32_t size = RecvInt(fd);
  if (size < 0 || size > (1 << 24)) throw std::runtime_error("the tracker sent a bad length");
  std::string json(static_cast<size_t>(size), '\0');
  RecvAll(fd, json.data(), json.size());
  return json;
}

void ExpectSuccess(int fd, const char* what) {
  std::string answer = RecvJson(fd);
  if (answer != std::to_string(kSuccess))
    throw std::runtime_error(std::string("the tracker refused ") + what + ": " + answer);
}

int Connect(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  int err = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (err != 0) throw std::runtime_error(host + ": " + gai_strerror(err));
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
  return fd;
}

// The listening socket, on the first free port of [port, port_end).
int Listen(const Options& o, int* bound_port) {
  for (int port = o.port; port < std::max(o.port_end, o.port + 1); ++port) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(o.host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
      throw std::runtime_error("cannot resolve --host " + o.host);
    int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    bool bound = fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 8) == 0;
    freeaddrinfo(found);
    if (bound) {
      *bound_port = port;
      return fd;
    }
    if (fd >= 0) close(fd);
  }
  throw std::runtime_error("no free port in " + std::to_string(o.port) + "-" +
                           std::to_string(o.port_end) + " on " + o.host);
}

class TrackerClient {
 public:
  TrackerClient(const Options& o, int port) : o_(o), port_(port), rng_(std::random_device{}()) {}
  ~TrackerClient() { Close(); }

  // Connects (retrying while the tracker is away) and reports this server's address.
  void Connect() {
    if (fd_ >= 0) return;
    for (bool told = false;; told = true) {
      try {
        fd_ = ::Connect(o_.tracker_host, o_.tracker_port);
        break;
      } catch (const std::exception& e) {
        if (!told)
          Log("cannot reach the tracker at " + Address() + " (" + e.what() + "); retrying");
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
    SendInt(fd_, kTrackerMagic);
    if (RecvInt(fd_) != kTrackerMagic) throw std::runtime_error(Address() + " is no RPC tracker");
    SendJson(fd_, "[" + std::to_string(kUpdateInfo) + ", {\"key\": " + Quoted("server:" + o_.key) +
                      ", \"addr\": [" + CustomAddr() + ", " + std::to_string(port_) + "]}]");
    ExpectSuccess(fd_, "this server's address");
    Log("registered with the tracker at " + Address() + " under key " + o_.key);
  }

  // Offers this server to the tracker's clients under a new match key, which it returns.
  std::string Put() {
    old_keys_.push_back(matchkey_);
    do {
      matchkey_ = o_.key + ":" + std::to_string(rng_()) + std::to_string(rng_());
    } while (std::find(old_keys_.begin(), old_keys_.end(), matchkey_) != old_keys_.end());
    SendJson(fd_, "[" + std::to_string(kPut) + ", " + Quoted(o_.key) + ", [" +
                      std::to_string(port_) + ", " + Quoted(matchkey_) + "], " + CustomAddr() + "]");
    ExpectSuccess(fd_, "this server's match key");
    return matchkey_;
  }

  // The ping while no client comes: whether the match key is still waiting for its client
  // (else a client took it from the tracker and has not come).
  bool KeyPending() {
    SendJson(fd_, "[" + std::to_string(kGetPendingMatchKeys) + "]");
    return RecvJson(fd_).find(Quoted(matchkey_)) != std::string::npos;
  }

  const std::string& matchkey() const { return matchkey_; }
  const std::string& key() const { return o_.key; }
  int fd() const { return fd_; }
  std::string Address() const { return o_.tracker_host + ":" + std::to_string(o_.tracker_port); }

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  std::string CustomAddr() const { return o_.custom_addr.empty() ? "null" : Quoted(o_.custom_addr); }

  const Options& o_;
  int port_;
  int fd_ = -1;
  std::string matchkey_;
  std::vector<std::string> old_keys_;
  std::mt19937 rng_;
};

struct Client {
  int fd;
  std::string address;
  int timeout_s;  // 0: none
};

// Waits for the client the tracker sends with the match key; a connection with any other key
// is refused. Pings the tracker meanwhile, and renews a key taken but not used.
Client AcceptClient(int listen_fd, TrackerClient* tracker) {
  tracker->Put();
  int unmatched_periods = 0;
  for (;;) {
    pollfd p{listen_fd, POLLIN, 0};
    int ready = poll(&p, 1, kPingPeriodS * 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      unmatched_periods = tracker->KeyPending() ? 0 : unmatched_periods + 1;
      if (unmatched_periods * kPingPeriodS > kUnmatchTimeoutS + kPingPeriodS) {
        Log("the match key was handed out but no client came: a new one");
        tracker->Put();
        unmatched_periods = 0;
      }
      continue;
    }
    sockaddr_storage peer{};
    socklen_t peer_size = sizeof(peer);
    int fd = accept(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_size);
    if (fd < 0) continue;
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    getnameinfo(reinterpret_cast<sockaddr*>(&peer), peer_size, host, sizeof(host), port,
                sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
    Client client{fd, std::string(host) + ":" + port, 0};
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(kHandshakeS);
    try {
      if (RecvInt(fd, deadline) != kRPCMagic) throw std::runtime_error("not a TVM RPC client");
      int32_t size = RecvInt(fd, deadline);
      if (size < 0 || size > 4096) throw std::runtime_error("a bad key length");
      std::string key(static_cast<size_t>(size), '\0');
      RecvAll(fd, key.data(), key.size(), deadline);
      // "client:<match key> [-timeout=N]"
      std::string first = key.substr(0, key.find(' '));
      if (first != "client:" + tracker->matchkey()) {
        SendInt(fd, kRPCMismatch);
        throw std::runtime_error("a key that is not this server's (" + first + ")");
      }
      size_t at = key.find(" -timeout=");
      if (at != std::string::npos) client.timeout_s = std::atoi(key.c_str() + at + 10);
      const std::string reply = "server:" + tracker->key();
      SendInt(fd, kRPCSuccess);
      SendInt(fd, static_cast<int32_t>(reply.size()));
      SendAll(fd, reply.data(), reply.size());
    } catch (const std::exception& e) {
      Log("refused " + client.address + ": " + e.what());
      close(fd);
      continue;
    }
    return client;
  }
}

// Inputs for a measurement: values in [1, 10), as TVM's random_fill_for_measure gives (valid
// for quantized types too); integers as integers.
void RandomFill(DLTensor* t) {
  if (t->device.device_type != kDLCPU)
    throw std::runtime_error("random fill: only CPU tensors on this server");
  static std::mt19937 engine(17);
  std::uniform_real_distribution<float> real(1.0f, 10.0f);
  std::uniform_int_distribution<int> integer(1, 9);
  int64_t n = t->dtype.lanes;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  char* data = static_cast<char*>(t->data) + t->byte_offset;
  const DLDataType dt = t->dtype;
  auto fill = [&](auto* p, auto make) {
    for (int64_t i = 0; i < n; ++i) p[i] = make();
  };
  auto bits_of = [](float f) {
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    return x;
  };
  if (dt.code == kDLFloat && dt.bits == 32) {
    fill(reinterpret_cast<float*>(data), [&] { return real(engine); });
  } else if (dt.code == kDLFloat && dt.bits == 64) {
    fill(reinterpret_cast<double*>(data), [&] { return static_cast<double>(real(engine)); });
  } else if (dt.code == kDLFloat && dt.bits == 16) {  // normal numbers only: [1, 10) is
    fill(reinterpret_cast<uint16_t*>(data), [&] {
      uint32_t x = bits_of(real(engine));
      return static_cast<uint16_t>(((((x >> 23) & 0xff) - 127 + 15) << 10) | ((x >> 13) & 0x3ff));
    });
  } else if (dt.code == kDLBfloat && dt.bits == 16) {
    fill(reinterpret_cast<uint16_t*>(data),
         [&] { return static_cast<uint16_t>(bits_of(real(engine)) >> 16); });
  } else if (dt.code == kDLBool || ((dt.code == kDLInt || dt.code == kDLUInt) && dt.bits == 1)) {
    fill(reinterpret_cast<uint8_t*>(data), [&] { return static_cast<uint8_t>(integer(engine) & 1); });
  } else if (dt.code == kDLInt || dt.code == kDLUInt) {
    switch (dt.bits) {
      case 8: fill(reinterpret_cast<int8_t*>(data), [&] { return int8_t(integer(engine)); }); break;
      case 16: fill(reinterpret_cast<int16_t*>(data), [&] { return int16_t(integer(engine)); }); break;
      case 32: fill(reinterpret_cast<int32_t*>(data), [&] { return int32_t(integer(engine)); }); break;
      case 64: fill(reinterpret_cast<int64_t*>(data), [&] { return int64_t(integer(engine)); }); break;
      default: throw std::runtime_error("random fill: no " + std::to_string(dt.bits) + "-bit integers");
    }
  } else {
    throw std::runtime_error("random fill: unsupported dtype (code " + std::to_string(dt.code) +
                             ", " + std::to_string(dt.bits) + " bits)");
  }
}

// The path of a session's file `name`: a relative name inside the session's directory `dir`
// (canonical), refused where absolute, with "..", or reaching out through a symlink. The empty
// name is the directory itself, as in TVM's own server (MetaSchedule's cleanup removes it).
std::string SessionPath(const std::filesystem::path& dir, const std::string& name) {
  namespace fs = std::filesystem;
  if (name.empty()) return dir.string();
  const fs::path relative(name);
  bool plain = relative.is_relative() &&
               std::none_of(relative.begin(), relative.end(),
                            [](const fs::path& part) { return part == ".."; });
  if (!plain)
    throw std::runtime_error("file name " + Quoted(name) + " is not a relative name inside the "
                             "session's directory");
  std::error_code error;
  const fs::path resolved = fs::weakly_canonical(dir / relative, error);
  auto inside = std::mismatch(dir.begin(), dir.end(), resolved.begin(), resolved.end());
  if (error || inside.first != dir.end())
    throw std::runtime_error("file name " + Quoted(name) + " leads out of the session's "
                             "directory");
  return (dir / relative).string();
}

// One session, in its own process and directory: the functions it may call, then the
// runtime's RPC server loop until the client closes.
void ServeSession(int fd, const std::string& session_dir) {
  if (chdir(session_dir.c_str()) != 0) throw std::runtime_error("cannot enter " + session_dir);
  const std::filesystem::path dir = std::filesystem::canonical(session_dir);
  ffi::Function::SetGlobal("tvm.rpc.server.workpath", ffi::Function::FromTyped(
      [dir](std::string name) { return SessionPath(dir, name); }), true);
  ffi::Function::SetGlobal("tvm.rpc.server.load_module", ffi::Function::FromTyped(
      [dir](std::string name) { return ffi::Module::LoadFromFile(SessionPath(dir, name)); }),
      true);
  ffi::Function fill = ffi::Function::FromTyped([](DLTensor* t) { RandomFill(t); });
  ffi::Function::SetGlobal("tvm.contrib.random.random_fill_for_measure", fill, true);
  ffi::Function::SetGlobal("tvm.contrib.random.random_fill", fill, true);
  tvm::runtime::RPCServerLoop(fd);
}

void RunSession(const Client& client, const Options& o, int listen_fd, int tracker_fd) {
  Log("connected from " + client.address);
  std::string pattern = o.work_dir + "/session-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("cannot make a session directory in " + o.work_dir);
  const std::string dir = pattern;
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(listen_fd);
    close(tracker_fd);
    try {
      ServeSession(client.fd, dir);
    } catch (const std::exception& e) {
      Log(std::string("session error: ") + e.what());
      std::fflush(stdout);
      _exit(1);
    }
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  bool timed_out = false;
  if (pid < 0) {
    Log(std::string("fork: ") + std::strerror(errno));
  } else {
    auto start = std::chrono::steady_clock::now();
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (client.timeout_s > 0 &&
          std::chrono::steady_clock::now() - start >= std::chrono::seconds(client.timeout_s)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (timed_out) {
    Log("session of " + client.address + " ended by its " + std::to_string(client.timeout_s) +
        " s timeout");
    if (auto reply = ffi::Function::GetGlobal("rpc.ReturnException")) {
      try {
        (*reply)(client.fd, "RPCSessionTimeoutError: Your " + std::to_string(client.timeout_s) +
                                "s session has expired, try to increase the \"session_timeout\" value.");
      } catch (...) {
      }
    }
  } else if (pid > 0 && WIFSIGNALED(status)) {
    Log("session of " + client.address + " died of signal " + std::to_string(WTERMSIG(status)));
  } else {
    Log("finished serving " + client.address);
  }
  close(client.fd);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

const char kUsage[] =
    "usage: odla_rpc_server --tracker HOST:PORT --key KEY [--host ADDR] [--port P]\n"
    "                       [--port-end Q] [--custom-addr ADDR] [--work-dir DIR]\n"
    "Registers this machine with a TVM RPC tracker under KEY and measures what odla-tvm tune\n"
    "--rpc-tracker HOST:PORT --rpc-key KEY sends it. Whoever reaches it runs code here.\n"
    "--host: the address to listen on (127.0.0.1; the board's address or 0.0.0.0 for the\n"
    "tuning host to reach it); --port/--port-end: the first free port of [P, Q) (9090, 9199);\n"
    "--custom-addr: the address clients reach this machine at, when not the one the tracker\n"
    "sees;\n"
    "--work-dir: where sessions keep their uploads (default $TMPDIR or /tmp).\n";

Options Parse(int argc, char** argv) {
  Options o;
  std::string tracker;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
    std::string value = argv[++i];
    if (arg == "--tracker") tracker = value;
    else if (arg == "--key") o.key = value;
    else if (arg == "--host") o.host = value;
    else if (arg == "--port") o.port = std::stoi(value);
    else if (arg == "--port-end") o.port_end = std::stoi(value);
    else if (arg == "--custom-addr") o.custom_addr = value;
    else if (arg == "--work-dir") o.work_dir = value;
    else throw std::invalid_argument("unknown option " + arg);
  }
  size_t colon = tracker.rfind(':');
  if (tracker.empty() || colon == std::string::npos || colon == 0)
    throw std::invalid_argument("--tracker HOST:PORT is required");
  o.tracker_host = tracker.substr(0, colon);
  o.tracker_port = std::stoi(tracker.substr(colon + 1));
  if (o.key.empty() || o.key.find(':') != std::string::npos)
    throw std::invalid_argument("--key KEY (without ':') is required");
  if (o.work_dir.empty()) o.work_dir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  try {
    o = Parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odla_rpc_server: %s\n%s", e.what(), kUsage);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);  // a peer gone is an error on its socket, not the end of the server
  try {
    int port = 0;
    int listen_fd = Listen(o, &port);
    Log("listening on " + o.host + ":" + std::to_string(port));
    TrackerClient tracker(o, port);
    for (;;) {
      try {
        tracker.Connect();
        Client client = AcceptClient(listen_fd, &tracker);
        RunSession(client, o, listen_fd, tracker.fd());
      } catch (const std::exception& e) {
        Log(std::string("lost the tracker (") + e.what() + "); reconnecting");
        tracker.Close();
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odla_rpc_server: error: %s\n", e.what());
    return 1;
  }
}

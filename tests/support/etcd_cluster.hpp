// A real etcd cluster on loopback for tests: N members (Debian's etcd-server), each its own
// process with its own data directory and ports, killed (SIGKILL) one by one on demand.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shoal/store.hpp"
#include "support/ports.hpp"

namespace shoal::testing {

class EtcdCluster {
 public:
  explicit EtcdCluster(int members) {
    if (::access("/usr/bin/etcd", X_OK) != 0)
      throw std::runtime_error("etcd is not installed: run scripts/install-deps.sh");
    char tmpl[] = "/tmp/shoal-etcd-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::string initial;
    for (int i = 0; i < members; ++i) {
      client_.push_back(free_port());
      peer_.push_back(free_port());
      initial += (i ? "," : "") + name(i) + "=http://127.0.0.1:" + std::to_string(peer_[i]);
    }
    for (int i = 0; i < members; ++i) {
      std::string p = "http://127.0.0.1:" + std::to_string(peer_[i]);
      std::string c = "http://127.0.0.1:" + std::to_string(client_[i]);
      std::vector<std::string> args{"/usr/bin/etcd",
                                    "--name=" + name(i),
                                    "--data-dir=" + dir_ + "/" + name(i),
                                    "--listen-peer-urls=" + p,
                                    "--initial-advertise-peer-urls=" + p,
                                    "--listen-client-urls=" + c,
                                    "--advertise-client-urls=" + c,
                                    "--initial-cluster=" + initial,
                                    "--initial-cluster-state=new",
                                    "--initial-cluster-token=" + dir_,
                                    "--log-level=error"};
      pid_t pid = fork();
      if (pid == 0) {
        std::string log = dir_ + "/" + name(i) + ".log";
        std::freopen(log.c_str(), "w", stdout);
        std::freopen(log.c_str(), "a", stderr);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        std::_Exit(127);
      }
      pids_.push_back(pid);
    }
    // Ready once a write commits (a leader is elected).
    EtcdStore::Options o;
    o.failover_timeout = std::chrono::seconds(30);
    EtcdStore probe(endpoints(), o);
    probe.set("shoal-test/ready", std::string("1"));
  }
  ~EtcdCluster() {
    for (size_t i = 0; i < pids_.size(); ++i) kill_member(static_cast<int>(i));
    std::filesystem::remove_all(dir_);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (auto p : client_) out.push_back("127.0.0.1:" + std::to_string(p));
    return out;
  }
  std::string spec() const {
    std::string out = "etcd://";
    for (size_t i = 0; i < client_.size(); ++i)
      out += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(client_[i]);
    return out;
  }
  /// The member that leads now, from etcdctl's status of the live members.
  int leader() const {
    std::string list;
    for (size_t i = 0; i < client_.size(); ++i)
      if (pids_[i] > 0) list += (list.empty() ? "" : ",") + endpoints()[i];
    std::string cmd = "ETCDCTL_API=3 etcdctl --endpoints=" + list +
                      " endpoint status -w json --command-timeout=3s 2>/dev/null";
    FILE* f = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    pclose(f);
    auto status = nlohmann::json::parse(out, nullptr, false);
    if (status.is_discarded()) return -1;
    for (auto& member : status) {
      if (member["Status"]["header"]["member_id"] != member["Status"]["leader"]) continue;
      std::string endpoint = member["Endpoint"];
      for (size_t i = 0; i < client_.size(); ++i)
        if (endpoint == endpoints()[i]) return static_cast<int>(i);
    }
    return -1;
  }
  void kill_member(int i) {
    if (pids_[i] <= 0) return;
    ::kill(pids_[i], SIGKILL);
    ::waitpid(pids_[i], nullptr, 0);
    pids_[i] = 0;
  }

 private:
  static std::string name(int i) { return "m" + std::to_string(i); }
  std::string dir_;
  std::vector<uint16_t> client_, peer_;
  std::vector<pid_t> pids_;
};

}  // namespace shoal::testing

#include "tune/learned_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.hpp"

namespace shoal::tune {

namespace {

using algorithms::AlgorithmInfo;
using algorithms::Collective;
using nlohmann::json;

constexpr std::string_view kFormat = "shoal-learned 1";

#define LEARNED_CHECK(cond, where, msg) \
  SHOAL_CHECK(cond, InvalidArgument, "learned file '" << source << "': " << where << ": " << msg)

const json& field(const json& obj, const char* name, std::string_view source,
                  const std::string& where) {
  LEARNED_CHECK(obj.contains(name), where, "missing field '" << name << "'");
  return obj.at(name);
}

std::string text_field(const json& obj, const char* name, std::string_view source,
                       const std::string& where) {
  const json& v = field(obj, name, source, where);
  LEARNED_CHECK(v.is_string(), where + "." + name, "must be a string, got " << v.dump());
  return v.get<std::string>();
}

int int_field(const json& obj, const char* name, int lowest, std::string_view source,
              const std::string& where) {
  const json& v = field(obj, name, source, where);
  LEARNED_CHECK(v.is_number_integer() && v.get<int64_t>() >= lowest && v.get<int64_t>() <= 1 << 24,
                where + "." + name,
                "must be an integer of at least " << lowest << ", got " << v.dump());
  return static_cast<int>(v.get<int64_t>());
}

double seconds_field(const json& obj, const char* name, std::string_view source,
                     const std::string& where) {
  const json& v = field(obj, name, source, where);
  LEARNED_CHECK(v.is_number() && v.get<double>() >= 0, where + "." + name,
                "must be a number of microseconds, at least 0, got " << v.dump());
  return v.get<double>() * 1e-6;
}

const AlgorithmInfo* row_field(const json& obj, const char* name, Collective c,
                               std::string_view source, const std::string& where) {
  const std::string row = text_field(obj, name, source, where);
  const AlgorithmInfo* found = algorithms::find_algorithm(c, row);
  LEARNED_CHECK(found, where + "." + name,
                "'" << row << "' is not a row of " << algorithms::to_string(c));
  return found;
}

LearnedBucket parse_bucket(const json& b, std::string_view source, const std::string& where) {
  LEARNED_CHECK(b.is_object(), where, "must be an object, got " << b.type_name());
  LearnedBucket out;
  const std::string coll = text_field(b, "collective", source, where);
  bool known = false;
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
    if (algorithms::to_string(c) == coll) out.collective = c, known = true;
  LEARNED_CHECK(known, where + ".collective",
                "'" << coll << "' is not all_reduce, all_gather or reduce_scatter");
  out.world = int_field(b, "world", 1, source, where);
  out.ranks_per_host = int_field(b, "ranks_per_host", 1, source, where);
  const std::string tr = text_field(b, "transport", source, where);
  LEARNED_CHECK(tr == "shm" || tr == "tcp", where + ".transport",
                "must be \"shm\" or \"tcp\", got \"" << tr << "\"");
  out.transport = tr == "shm" ? Transport::shm : Transport::tcp;
  out.log2_bytes = int_field(b, "log2_bytes", 0, source, where);
  LEARNED_CHECK(out.log2_bytes < 64, where + ".log2_bytes", "must be below 64");
  out.pick = row_field(b, "pick", out.collective, source, where);
  out.alternative = row_field(b, "alternative", out.collective, source, where);
  // A runner-up is there where the model priced a third row close to its pick.
  const bool runner_up = b.contains("runner_up");
  if (runner_up) out.runner_up = row_field(b, "runner_up", out.collective, source, where);
  out.winner = row_field(b, "winner", out.collective, source, where);
  LEARNED_CHECK(
      out.winner == out.pick || out.winner == out.alternative || out.winner == out.runner_up,
      where + ".winner", "'" << out.winner->name << "' is none of the candidates");
  out.pick_s = seconds_field(b, "pick_us", source, where);
  out.alternative_s = seconds_field(b, "alternative_us", source, where);
  if (runner_up) out.runner_up_s = seconds_field(b, "runner_up_us", source, where);
  out.exploration_s = seconds_field(b, "exploration_us", source, where);
  return out;
}

}  // namespace

bool same_bucket(const LearnedBucket& a, const LearnedBucket& b) {
  return a.collective == b.collective && a.world == b.world &&
         a.ranks_per_host == b.ranks_per_host && a.transport == b.transport &&
         a.log2_bytes == b.log2_bytes;
}

std::vector<LearnedBucket> parse_learned_file(std::string_view text, std::string_view source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    SHOAL_CHECK(false, InvalidArgument, "learned file '" << source << "': not JSON: " << e.what());
  }
  LEARNED_CHECK(doc.is_object(), "the file", "must be a JSON object");
  LEARNED_CHECK(text_field(doc, "format", source, "the file") == kFormat, "format",
                "must be \"" << kFormat << "\"");
  const json& buckets = field(doc, "buckets", source, "the file");
  LEARNED_CHECK(buckets.is_array(), "buckets", "must be an array");
  std::vector<LearnedBucket> out;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const std::string where = "buckets[" + std::to_string(i) + "]";
    LearnedBucket b = parse_bucket(buckets[i], source, where);
    for (const auto& seen : out)
      LEARNED_CHECK(!same_bucket(seen, b), where, "a second entry for the same bucket");
    out.push_back(b);
  }
  return out;
}

std::string learned_to_json(const std::vector<LearnedBucket>& buckets) {
  json list = json::array();
  for (const auto& b : buckets) {
    json entry = {{"collective", std::string(algorithms::to_string(b.collective))},
                  {"world", b.world},
                  {"ranks_per_host", b.ranks_per_host},
                  {"transport", std::string(to_string(b.transport))},
                  {"log2_bytes", b.log2_bytes},
                  {"pick", std::string(b.pick->name)},
                  {"alternative", std::string(b.alternative->name)},
                  {"winner", std::string(b.winner->name)},
                  {"pick_us", b.pick_s * 1e6},
                  {"alternative_us", b.alternative_s * 1e6},
                  {"exploration_us", b.exploration_s * 1e6}};
    if (b.runner_up) {
      entry["runner_up"] = std::string(b.runner_up->name);
      entry["runner_up_us"] = b.runner_up_s * 1e6;
    }
    list.push_back(std::move(entry));
  }
  return json{{"format", std::string(kFormat)}, {"buckets", list}}.dump(1) + "\n";
}

std::vector<LearnedBucket> read_learned_file(const std::string& path) {
  std::error_code absent;
  if (!std::filesystem::exists(path, absent)) return {};
  std::ifstream in(path);
  SHOAL_CHECK(in.good(), InvalidArgument,
              "learned file '" << path << "': cannot be read: " << std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return parse_learned_file(text.str(), path);
}

void save_learned_file(const std::string& path, const std::vector<LearnedBucket>& mine) {
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SHOAL_CHECK(
      lock >= 0, InvalidArgument,
      "learned file '" << path << "': cannot open " << lock_path << ": " << std::strerror(errno));
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing drops the lock
  } unlock{lock};
  SHOAL_CHECK(
      ::flock(lock, LOCK_EX) == 0, InvalidArgument,
      "learned file '" << path << "': cannot lock " << lock_path << ": " << std::strerror(errno));
  std::vector<LearnedBucket> all = read_learned_file(path);
  for (const auto& b : mine) {
    bool replaced = false;
    for (auto& old : all)
      if (same_bucket(old, b)) old = b, replaced = true;
    if (!replaced) all.push_back(b);
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << learned_to_json(all);
    SHOAL_CHECK(out.good(), InvalidArgument, "learned file '" << path << "': cannot write " << tmp);
  }
  SHOAL_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, InvalidArgument,
              "learned file '" << path << "': cannot rename " << tmp
                               << " over it: " << std::strerror(errno));
}

}  // namespace shoal::tune

#include "tune/tuning_file.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "algorithms/hierarchy.hpp"
#include "core/check.hpp"

namespace shoal::tune {

namespace {

using algorithms::AlgorithmInfo;
using algorithms::Collective;
using nlohmann::json;

constexpr std::string_view kFormat = "shoal-tune 1";
constexpr std::string_view kHierarchical = "hierarchical";

// Every problem names the file and where in it: "tuning file 'x.json': tables[2].sizes: ...".
#define TUNE_CHECK(cond, where, msg) \
  SHOAL_CHECK(cond, InvalidArgument, "tuning file '" << source << "': " << where << ": " << msg)

size_t registry_index(const AlgorithmInfo* row) {
  return static_cast<size_t>(row - algorithms::registry().data());
}

std::string names_for(Collective c) {
  std::string out;
  for (const auto& row : algorithms::registry())
    if (row.collective == c && !row.follows_links)
      out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

const json& field(const json& obj, const char* name, std::string_view source,
                  const std::string& where) {
  TUNE_CHECK(obj.contains(name), where, "missing field '" << name << "'");
  return obj.at(name);
}

int positive_int(const json& obj, const char* name, std::string_view source,
                 const std::string& where) {
  const json& v = field(obj, name, source, where);
  TUNE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= (1 << 24),
             where + "." + name, "must be a positive integer, got " << v.dump());
  return static_cast<int>(v.get<int64_t>());
}

Measurements parse_table(const json& t, std::string_view source, const std::string& where) {
  TUNE_CHECK(t.is_object(), where, "must be an object, got " << t.type_name());
  Measurements m;
  const json& coll = field(t, "collective", source, where);
  TUNE_CHECK(coll.is_string(), where + ".collective", "must be a string");
  bool known = false;
  for (int c = 0; c <= static_cast<int>(Collective::recv); ++c)
    if (algorithms::to_string(static_cast<Collective>(c)) == coll.get<std::string>()) {
      m.collective = static_cast<Collective>(c);
      known = true;
    }
  TUNE_CHECK(known, where + ".collective",
             "unknown collective '" << coll.get<std::string>() << "'");
  m.world = positive_int(t, "world", source, where);
  m.ranks_per_host = positive_int(t, "ranks_per_host", source, where);
  TUNE_CHECK(m.ranks_per_host <= m.world, where + ".ranks_per_host",
             m.ranks_per_host << " is more than the world size " << m.world);
  const json& tr = field(t, "transport", source, where);
  TUNE_CHECK(tr.is_string() && (tr.get<std::string>() == "shm" || tr.get<std::string>() == "tcp"),
             where + ".transport", "must be \"shm\" or \"tcp\", got " << tr.dump());
  m.transport = tr.get<std::string>() == "shm" ? Transport::shm : Transport::tcp;
  if (t.contains("cores_per_host"))
    m.cores_per_host = positive_int(t, "cores_per_host", source, where);
  if (t.contains("source")) {
    const json& src = t.at("source");
    TUNE_CHECK(src.is_string() &&
                   (src.get<std::string>() == "measured" || src.get<std::string>() == "simulated"),
               where + ".source", "must be \"measured\" or \"simulated\", got " << src.dump());
    m.simulated = src.get<std::string>() == "simulated";
  }
  if (t.contains("calibration")) {
    const json& cal = t.at("calibration");
    const std::string w = where + ".calibration";
    TUNE_CHECK(cal.is_object(), w,
               "must be an object of alpha_us, beta_ns_per_byte, gamma_ns_per_byte (and "
               "busy_gamma_ns_per_byte)");
    auto constant = [&](const char* name, double scale) {
      const json& v = field(cal, name, source, w);
      TUNE_CHECK(v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>()),
                 w + "." + name, "must be a positive number, got " << v.dump());
      return v.get<double>() * scale;
    };
    m.calibration =
        algorithms::CostParams{constant("alpha_us", 1e-6), constant("beta_ns_per_byte", 1e-9),
                               constant("gamma_ns_per_byte", 1e-9)};
    // Files written before busy_gamma was measured keep the default.
    if (cal.contains("busy_gamma_ns_per_byte"))
      m.calibration->busy_gamma = constant("busy_gamma_ns_per_byte", 1e-9);
  }
  const json& sizes = field(t, "sizes", source, where);
  TUNE_CHECK(sizes.is_array() && !sizes.empty(), where + ".sizes",
             "must be a non-empty array of byte counts");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const json& s = sizes[i];
    TUNE_CHECK(s.is_number_unsigned() && s.get<uint64_t>() >= 1, where + ".sizes[" << i << "]",
               "must be a positive integer, got " << s.dump());
    TUNE_CHECK(
        m.sizes.empty() || s.get<uint64_t>() > m.sizes.back(), where + ".sizes[" << i << "]",
        s.dump() << " does not follow " << m.sizes.back() << " (sizes must increase strictly)");
    m.sizes.push_back(s.get<uint64_t>());
  }
  const json& times = field(t, "times_us", source, where);
  TUNE_CHECK(times.is_object() && !times.empty(), where + ".times_us",
             "must be an object of algorithm name -> microseconds per size");
  for (const auto& item : times.items()) {
    const std::string& name = item.key();
    const json& list = item.value();
    const std::string w = where + ".times_us." + name;
    const bool hierarchical = name == kHierarchical;
    const AlgorithmInfo* row =
        hierarchical ? nullptr : algorithms::find_algorithm(m.collective, name);
    if (hierarchical) {
      TUNE_CHECK(algorithms::composable(m.collective), w,
                 "only all_reduce, all_gather and reduce_scatter have a hierarchical composition");
      TUNE_CHECK(m.ranks_per_host > 1 && m.ranks_per_host < m.world, w,
                 "needs several hosts of several ranks (world " << m.world << ", ranks_per_host "
                                                                << m.ranks_per_host << ")");
    } else {
      TUNE_CHECK(
          !row || !row->follows_links, w,
          name << " follows measured links, which a table does not know (docs/algorithms.md, "
                  "\"Links\")");
      TUNE_CHECK(row != nullptr, w,
                 "unknown algorithm '"
                     << name << "' for " << algorithms::to_string(m.collective)
                     << " (it has: " << names_for(m.collective)
                     << (algorithms::composable(m.collective) ? ", hierarchical" : "") << ")");
    }
    TUNE_CHECK(
        list.is_array() && list.size() == m.sizes.size(), w,
        "must be an array of " << m.sizes.size() << " times, one per size, got " << list.dump());
    std::vector<double> seconds;
    for (size_t i = 0; i < list.size(); ++i) {
      TUNE_CHECK(
          list[i].is_number() && list[i].get<double>() > 0 && std::isfinite(list[i].get<double>()),
          w + "[" << i << "]", "must be a positive number of microseconds, got " << list[i].dump());
      seconds.push_back(list[i].get<double>() * 1e-6);
    }
    if (hierarchical)
      m.hierarchical = std::move(seconds);
    else
      m.times.emplace_back(row, std::move(seconds));
  }
  TUNE_CHECK(!m.times.empty(), where + ".times_us",
             "must time at least one algorithm besides hierarchical");
  // Registry order, so that ties go to the earlier row whatever the file's key order.
  std::sort(m.times.begin(), m.times.end(), [](const auto& a, const auto& b) {
    return registry_index(a.first) < registry_index(b.first);
  });
  return m;
}

}  // namespace

std::string_view to_string(Transport t) { return t == Transport::shm ? "shm" : "tcp"; }

TuningFile parse_tuning_file(std::string_view text, std::string_view source) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    SHOAL_THROW(InvalidArgument, "tuning file '" << source << "': not valid JSON: " << e.what());
  }
  TUNE_CHECK(doc.is_object(), "top level", "must be an object with \"format\" and \"tables\"");
  const json& format = field(doc, "format", source, "top level");
  TUNE_CHECK(format.is_string() && format.get<std::string>() == kFormat, "format",
             "expected \"" << kFormat << "\", got " << format.dump()
                           << " (written by another shoal-tune?)");
  const json& tables = field(doc, "tables", source, "top level");
  TUNE_CHECK(tables.is_array(), "tables", "must be an array");
  TuningFile file;
  file.source = std::string(source);
  for (size_t i = 0; i < tables.size(); ++i) {
    const std::string where = "tables[" + std::to_string(i) + "]";
    Measurements m = parse_table(tables[i], source, where);
    for (const auto& other : file.tables)
      TUNE_CHECK(!same_key(other, m), where,
                 "a second table for " << algorithms::to_string(m.collective) << " world "
                                       << m.world << " ranks_per_host " << m.ranks_per_host
                                       << " transport " << to_string(m.transport));
    file.tables.push_back(std::move(m));
  }
  return file;
}

TuningFile load_tuning_file(const std::string& path, bool keep_simulated) {
  std::ifstream in(path, std::ios::binary);
  SHOAL_CHECK(
      in.good(), InvalidArgument,
      "tuning file '" << path << "' cannot be read (SHOAL_TUNE_FILE; write one with shoal-tune)");
  std::ostringstream text;
  text << in.rdbuf();
  TuningFile file = parse_tuning_file(text.str(), path);
  if (!keep_simulated)
    std::erase_if(file.tables, [](const Measurements& m) { return m.simulated; });
  return file;
}

std::string to_json(const TuningFile& file, std::string_view extra) {
  json doc = extra.empty() ? json::object() : json::parse(extra.begin(), extra.end());
  doc["format"] = std::string(kFormat);
  json tables = json::array();
  for (const auto& m : file.tables) {
    json t;
    t["collective"] = std::string(algorithms::to_string(m.collective));
    t["world"] = m.world;
    t["ranks_per_host"] = m.ranks_per_host;
    t["transport"] = std::string(to_string(m.transport));
    if (m.cores_per_host > 0) t["cores_per_host"] = m.cores_per_host;
    if (m.simulated) t["source"] = "simulated";
    if (m.calibration)
      t["calibration"] = {{"alpha_us", m.calibration->alpha * 1e6},
                          {"beta_ns_per_byte", m.calibration->beta * 1e9},
                          {"gamma_ns_per_byte", m.calibration->gamma * 1e9},
                          {"busy_gamma_ns_per_byte", m.calibration->busy_gamma * 1e9}};
    t["sizes"] = m.sizes;
    json times = json::object();
    auto microseconds = [](const std::vector<double>& seconds) {
      json list = json::array();
      for (double s : seconds) list.push_back(std::round(s * 1e9) / 1e3);  // ns precision
      return list;
    };
    for (const auto& [row, seconds] : m.times)
      times[std::string(row->name)] = microseconds(seconds);
    if (!m.hierarchical.empty()) times[std::string(kHierarchical)] = microseconds(m.hierarchical);
    t["times_us"] = times;
    tables.push_back(t);
  }
  doc["tables"] = tables;
  return doc.dump(1);
}

}  // namespace shoal::tune

// Development tool: runs the voice activity detector over the stereo calls of the accuracy
// corpus and compares the turns it yields (pauses under 700 ms merged) with the truth.
//
//   vad_eval [--corpus=DIR] [--cache=DIR] [--option=value ...] [call-id-substring ...]
//
// Options are the VoiceActivityOptions fields (e.g. --onset_margin_db=9). Audio is decoded with
// the ffmpeg CLI to 16 kHz float and cached in the cache directory (default /tmp/vad_cache).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "services/scoring/timeline.h"
#include "services/scoring/voice_activity.h"

namespace {

using calleval::scoring::kWorkingSampleRate;
using calleval::scoring::Span;
using calleval::scoring::VoiceActivityDetector;
using calleval::scoring::VoiceActivityOptions;

constexpr double kTurnMergeS = 0.7;
constexpr double kMinOverlapS = 0.2;
constexpr double kSilenceS = 3.0;

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// Interleaved stereo float samples at 16 kHz, from the cache or decoded with ffmpeg.
bool LoadAudio(const std::string& audio_path, const std::string& cache_path,
               std::vector<float>* interleaved) {
  if (!std::filesystem::exists(cache_path)) {
    const std::string cmd = "ffmpeg -v error -y -i " + Quote(audio_path) + " -ar " +
                            std::to_string(kWorkingSampleRate) + " -f f32le -acodec pcm_f32le " +
                            Quote(cache_path);
    if (std::system(cmd.c_str()) != 0) return false;
  }
  std::ifstream in(cache_path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff bytes = in.tellg();
  in.seekg(0);
  interleaved->resize(static_cast<size_t>(bytes) / sizeof(float));
  in.read(reinterpret_cast<char*>(interleaved->data()),
          static_cast<std::streamsize>(interleaved->size() * sizeof(float)));
  return static_cast<bool>(in);
}

std::vector<Span> MergeTurns(const std::vector<Span>& segments) {
  std::vector<Span> turns;
  for (const Span& s : segments) {
    if (!turns.empty() && s.start_s - turns.back().end_s < kTurnMergeS) {
      turns.back().end_s = std::max(turns.back().end_s, s.end_s);
    } else {
      turns.push_back(s);
    }
  }
  return turns;
}

// Turns of `a` that start inside a turn of `b` and overlap it by at least 200 ms.
int CountInterruptions(const std::vector<Span>& a, const std::vector<Span>& b) {
  int count = 0;
  for (const Span& x : a) {
    for (const Span& y : b) {
      if (y.start_s < x.start_s && x.start_s < y.end_s &&
          std::min(x.end_s, y.end_s) - x.start_s >= kMinOverlapS) {
        ++count;
      }
    }
  }
  return count;
}

std::vector<Span> Silences(const std::vector<Span>& a, const std::vector<Span>& b,
                           double duration) {
  std::vector<Span> all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end(),
            [](const Span& x, const Span& y) { return x.start_s < y.start_s; });
  std::vector<Span> out;
  double t = 0;
  for (const Span& s : all) {
    if (s.start_s - t >= kSilenceS) out.push_back({t, s.start_s});
    t = std::max(t, s.end_s);
  }
  if (duration - t >= kSilenceS) out.push_back({t, duration});
  return out;
}

// Latency turns as the corpus defines them: user turn end -> next agent start.
std::vector<std::pair<double, double>> Latencies(const std::vector<Span>& agent,
                                                 const std::vector<Span>& user) {
  std::vector<std::pair<double, double>> out;
  for (size_t u = 0; u < user.size(); ++u) {
    const double end = user[u].end_s;
    bool agent_active = false;
    bool overlapped = false;
    for (const Span& a : agent) {
      if (a.start_s < end && a.end_s > end) agent_active = true;
      if (a.start_s > user[u].start_s && a.start_s < end) overlapped = true;
    }
    if (agent_active || overlapped) continue;
    double next_agent = 1e18;
    for (const Span& a : agent) {
      if (a.start_s >= end) next_agent = std::min(next_agent, a.start_s);
    }
    const bool user_first = u + 1 < user.size() && user[u + 1].start_s < next_agent;
    if (next_agent < 1e17 && !user_first) out.push_back({end, (next_agent - end) * 1000});
  }
  return out;
}

// Pink-ish noise (Paul Kellet's economy filter over white noise) of the given RMS on both
// channels, independent per channel.
void AddPinkNoise(std::vector<float>* interleaved, double rms, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> white(0.0, 1.0);
  const size_t total = interleaved->size() / 2;
  for (int c = 0; c < 2; ++c) {
    std::vector<double> noise(total);
    double b0 = 0, b1 = 0, b2 = 0, sum = 0;
    for (size_t k = 0; k < total; ++k) {
      const double w = white(gen);
      b0 = 0.99765 * b0 + w * 0.0990460;
      b1 = 0.96300 * b1 + w * 0.2965164;
      b2 = 0.57000 * b2 + w * 1.0526913;
      noise[k] = b0 + b1 + b2 + w * 0.1848;
      sum += noise[k] * noise[k];
    }
    const double scale = total ? rms / std::sqrt(sum / total) : 0;
    for (size_t k = 0; k < total; ++k) {
      (*interleaved)[2 * k + c] += static_cast<float>(noise[k] * scale);
    }
  }
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

struct Totals {
  std::vector<double> boundary_errors_ms;
  std::vector<double> latency_errors_ms;
  int truth_turns = 0, missed = 0, extra = 0;
  int interruption_calls = 0, interruption_exact = 0;
  int silences_truth = 0, silences_found = 0, silences_matched = 0;
  std::vector<double> silence_errors_ms;
  int duration_values = 0, duration_within_5pct = 0;
};

std::vector<Span> ReadTurns(const nlohmann::json& arr) {
  std::vector<Span> out;
  for (const auto& t : arr) out.push_back({t["start_s"].get<double>(), t["end_s"].get<double>()});
  return out;
}

bool SetOption(VoiceActivityOptions* o, const std::string& key, double v) {
  std::map<std::string, double*> fields = {
      {"hop_ms", &o->hop_ms},
      {"frame_ms", &o->frame_ms},
      {"highpass_hz", &o->highpass_hz},
      {"noise_floor_percentile", &o->noise_floor_percentile},
      {"speech_peak_percentile", &o->speech_peak_percentile},
      {"onset_margin_db", &o->onset_margin_db},
      {"hangover_margin_db", &o->hangover_margin_db},
      {"peak_range_db", &o->peak_range_db},
      {"absolute_floor_dbfs", &o->absolute_floor_dbfs},
      {"crosstalk_min_difference_db", &o->crosstalk_min_difference_db},
      {"crosstalk_leak_db", &o->crosstalk_leak_db},
      {"min_core_ms", &o->min_core_ms},
      {"min_gap_ms", &o->min_gap_ms},
      {"crosstalk_min_coherence", &o->crosstalk_min_coherence},
      {"max_extension_ms", &o->max_extension_ms},
      {"smoothed_margin_db", &o->smoothed_margin_db},
      {"release_search_ms", &o->release_search_ms},
      {"release_margin_db", &o->release_margin_db},
  };
  auto it = fields.find(key);
  if (key == "smoothing_half_width") {
    o->smoothing_half_width = static_cast<int>(v);
    return true;
  }
  if (it == fields.end()) return false;
  *it->second = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus = CALLEVAL_CORPUS_DIR;
  std::string cache = "/tmp/vad_cache";
  VoiceActivityOptions options;
  std::vector<std::string> filters;
  bool verbose = false;
  // Stress test on top of the corpus: extra crosstalk (dB) and pink noise (SNR against the
  // -22 dBFS active speech level) applied to the decoded audio; 0 = off.
  double extra_crosstalk_db = 0;
  double extra_snr_db = 0;
  unsigned noise_seed = 12345;
  double dc_offset = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--corpus=", 0) == 0) {
      corpus = arg.substr(9);
    } else if (arg.rfind("--cache=", 0) == 0) {
      cache = arg.substr(8);
    } else if (arg.rfind("--xt_db=", 0) == 0) {
      extra_crosstalk_db = std::atof(arg.c_str() + 8);
    } else if (arg.rfind("--snr_db=", 0) == 0) {
      extra_snr_db = std::atof(arg.c_str() + 9);
    } else if (arg.rfind("--noise_seed=", 0) == 0) {
      noise_seed = static_cast<unsigned>(std::atol(arg.c_str() + 13));
    } else if (arg.rfind("--dc=", 0) == 0) {
      dc_offset = std::atof(arg.c_str() + 5);
    } else if (arg == "-v") {
      verbose = true;
    } else if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      const size_t eq = arg.find('=');
      if (!SetOption(&options, arg.substr(2, eq - 2), std::atof(arg.c_str() + eq + 1))) {
        std::fprintf(stderr, "unknown option %s\n", arg.c_str());
        return 2;
      }
    } else {
      filters.push_back(arg);
    }
  }
  std::filesystem::create_directories(cache);
  std::vector<std::filesystem::path> truths;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 11 && name.substr(name.size() - 11) == ".truth.json") {
      truths.push_back(entry.path());
    }
  }
  std::sort(truths.begin(), truths.end());

  Totals tot;
  std::printf("%-32s %5s %4s %4s %4s %7s %7s %7s %7s %6s %6s %9s %9s %7s\n", "call", "turns",
              "miss", "xtra", "n", "st_med", "st_p95", "en_med", "en_p95", "st_bia", "en_bia",
              "intr t/d", "sil t/d/m", "durerr%");
  for (const auto& path : truths) {
    std::ifstream tin(path);
    nlohmann::json truth = nlohmann::json::parse(tin);
    const std::string id = truth["id"];
    if (truth["audio"]["channels"].get<int>() != 2) continue;
    if (!filters.empty() && std::none_of(filters.begin(), filters.end(), [&](const std::string& f) {
          return id.find(f) != std::string::npos;
        })) {
      continue;
    }
    std::vector<float> pcm;
    const std::string audio = (path.parent_path() / truth["audio_file"].get<std::string>());
    if (!LoadAudio(audio, cache + "/" + id + ".f32", &pcm)) {
      std::fprintf(stderr, "%s: cannot decode %s\n", id.c_str(), audio.c_str());
      continue;
    }
    const size_t total = pcm.size() / 2;
    if (extra_crosstalk_db != 0) {
      const float g = static_cast<float>(std::pow(10.0, extra_crosstalk_db / 20));
      for (size_t k = 0; k < total; ++k) {
        const float l = pcm[2 * k];
        const float r = pcm[2 * k + 1];
        pcm[2 * k] = l + g * r;
        pcm[2 * k + 1] = r + g * l;
      }
    }
    for (float& v : pcm) v += static_cast<float>(dc_offset);
    if (extra_snr_db != 0) {
      AddPinkNoise(&pcm, std::pow(10.0, (-22.0 - extra_snr_db) / 20), noise_seed);
    }
    VoiceActivityDetector vad(kWorkingSampleRate, 2, options);
    // Odd block size on purpose: the detector must not depend on block boundaries.
    const size_t block = 4099;
    std::array<std::vector<float>, 2> buf;
    for (size_t pos = 0; pos < total; pos += block) {
      const size_t n = std::min(block, total - pos);
      for (int c = 0; c < 2; ++c) {
        buf[c].resize(n);
        for (size_t k = 0; k < n; ++k) buf[c][k] = pcm[(pos + k) * 2 + c];
      }
      vad.Feed(buf, n);
    }
    const auto segments = vad.Finish();
    const int agent_ch = truth["audio"]["channel_map"]["agent"].get<int>();
    const int user_ch = truth["audio"]["channel_map"]["user"].get<int>();
    std::map<std::string, std::vector<Span>> det = {{"agent", MergeTurns(segments[agent_ch])},
                                                    {"user", MergeTurns(segments[user_ch])}};
    std::map<std::string, std::vector<Span>> tru = {{"agent", ReadTurns(truth["turns"]["agent"])},
                                                    {"user", ReadTurns(truth["turns"]["user"])}};
    std::vector<double> st_err, en_err;
    double st_bias = 0, en_bias = 0;
    int n_truth = 0, missed = 0, extra = 0;
    double dur_err_max = 0;
    for (const std::string party : {"agent", "user"}) {
      const auto& t = tru[party];
      const auto& d = det[party];
      std::vector<bool> used(d.size(), false);
      double td = 0, dd = 0;
      for (const Span& s : t) td += s.duration_s();
      for (const Span& s : d) dd += s.duration_s();
      if (td > 0) {
        const double rel = std::fabs(dd - td) / td * 100;
        dur_err_max = std::max(dur_err_max, rel);
        ++tot.duration_values;
        if (rel <= 5.0) ++tot.duration_within_5pct;
      }
      for (const Span& s : t) {
        ++n_truth;
        int best = -1;
        double best_ov = 0;
        for (size_t k = 0; k < d.size(); ++k) {
          const double ov = std::min(s.end_s, d[k].end_s) - std::max(s.start_s, d[k].start_s);
          if (!used[k] && ov > best_ov) {
            best_ov = ov;
            best = static_cast<int>(k);
          }
        }
        if (best < 0) {
          ++missed;
          if (verbose) std::printf("  missed %s %.3f-%.3f\n", party.c_str(), s.start_s, s.end_s);
          continue;
        }
        used[best] = true;
        const double es = (d[best].start_s - s.start_s) * 1000;
        const double ee = (d[best].end_s - s.end_s) * 1000;
        st_err.push_back(std::fabs(es));
        en_err.push_back(std::fabs(ee));
        st_bias += es;
        en_bias += ee;
        if (verbose && (std::fabs(es) > 40 || std::fabs(ee) > 40)) {
          std::printf("  %s truth %.3f-%.3f det %.3f-%.3f (%+.0f %+.0f ms)\n", party.c_str(),
                      s.start_s, s.end_s, d[best].start_s, d[best].end_s, es, ee);
        }
      }
      for (size_t k = 0; k < d.size(); ++k) {
        if (!used[k]) {
          ++extra;
          if (verbose) {
            std::printf("  extra %s %.3f-%.3f\n", party.c_str(), d[k].start_s, d[k].end_s);
          }
        }
      }
    }
    const int ti_ai = CountInterruptions(tru["agent"], tru["user"]);
    const int ti_us = CountInterruptions(tru["user"], tru["agent"]);
    const int di_ai = CountInterruptions(det["agent"], det["user"]);
    const int di_us = CountInterruptions(det["user"], det["agent"]);
    ++tot.interruption_calls;
    if (ti_ai == di_ai && ti_us == di_us) ++tot.interruption_exact;

    const double duration = truth["duration_seconds"].get<double>();
    const auto ts = Silences(tru["agent"], tru["user"], duration);
    const auto ds = Silences(det["agent"], det["user"], duration);
    int matched = 0;
    std::vector<bool> sused(ds.size(), false);
    for (const Span& s : ts) {
      for (size_t k = 0; k < ds.size(); ++k) {
        const double ov = std::min(s.end_s, ds[k].end_s) - std::max(s.start_s, ds[k].start_s);
        if (!sused[k] && ov >= 0.5 * std::max(s.duration_s(), ds[k].duration_s())) {
          sused[k] = true;
          ++matched;
          tot.silence_errors_ms.push_back(std::fabs(s.duration_s() - ds[k].duration_s()) * 1000);
          break;
        }
      }
    }
    tot.silences_truth += ts.size();
    tot.silences_found += ds.size();
    tot.silences_matched += matched;

    // Latency turns, matched by nearest user end within 1 s.
    const auto tl = Latencies(tru["agent"], tru["user"]);
    const auto dl = Latencies(det["agent"], det["user"]);
    std::vector<bool> lused(dl.size(), false);
    for (const auto& l : tl) {
      int best = -1;
      for (size_t k = 0; k < dl.size(); ++k) {
        if (lused[k] || std::fabs(dl[k].first - l.first) > 1.0) continue;
        if (best < 0 || std::fabs(dl[k].first - l.first) < std::fabs(dl[best].first - l.first)) {
          best = static_cast<int>(k);
        }
      }
      if (best < 0) {
        tot.latency_errors_ms.push_back(10000);
      } else {
        lused[best] = true;
        tot.latency_errors_ms.push_back(std::fabs(dl[best].second - l.second));
      }
    }
    for (bool u : lused) {
      if (!u) tot.latency_errors_ms.push_back(10000);
    }

    const size_t nm = st_err.size();
    std::printf(
        "%-32s %5d %4d %4d %4zu %7.1f %7.1f %7.1f %7.1f %6.1f %6.1f %4d/%-4d %3zu/%2zu/%2d %7.2f\n",
        id.c_str(), n_truth, missed, extra, nm, Quantile(st_err, 0.5), Quantile(st_err, 0.95),
        Quantile(en_err, 0.5), Quantile(en_err, 0.95), nm ? st_bias / nm : 0.0,
        nm ? en_bias / nm : 0.0, ti_ai + ti_us, di_ai + di_us, ts.size(), ds.size(), matched,
        dur_err_max);
    tot.truth_turns += n_truth;
    tot.missed += missed;
    tot.extra += extra;
    tot.boundary_errors_ms.insert(tot.boundary_errors_ms.end(), st_err.begin(), st_err.end());
    tot.boundary_errors_ms.insert(tot.boundary_errors_ms.end(), en_err.begin(), en_err.end());
  }
  const double p = tot.silences_found ? double(tot.silences_matched) / tot.silences_found : 1;
  const double r = tot.silences_truth ? double(tot.silences_matched) / tot.silences_truth : 1;
  std::printf(
      "TOTAL turns %d missed %d extra %d | boundary err median %.1f p95 %.1f ms | latency err "
      "median %.1f p95 %.1f ms (n=%zu) | interruptions exact %d/%d | silence F1 %.3f p95 dur "
      "err %.1f ms | turn time within 5%%: %d/%d\n",
      tot.truth_turns, tot.missed, tot.extra, Quantile(tot.boundary_errors_ms, 0.5),
      Quantile(tot.boundary_errors_ms, 0.95), Quantile(tot.latency_errors_ms, 0.5),
      Quantile(tot.latency_errors_ms, 0.95), tot.latency_errors_ms.size(), tot.interruption_exact,
      tot.interruption_calls, (p + r > 0) ? 2 * p * r / (p + r) : 0.0,
      Quantile(tot.silence_errors_ms, 0.95), tot.duration_within_5pct, tot.duration_values);
  return 0;
}

#include "cmd/flags.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace calleval::cli {

std::string EnvName(absl::string_view prefix, absl::string_view flag) {
  return absl::StrCat(prefix, absl::AsciiStrToUpper(absl::StrReplaceAll(flag, {{"-", "_"}})));
}

std::string FormatFlagsHelp(const std::vector<FlagHelp>& flags, absl::string_view env_prefix) {
  std::string out;
  for (const FlagHelp& flag : flags) {
    absl::StrAppend(&out, "  --", flag.name, flag.value_name.empty() ? "" : " ",
                    flag.value_name, "  (");
    if (flag.required) {
      absl::StrAppend(&out, "required");
    } else {
      absl::StrAppend(&out, "default ", flag.default_text);
    }
    if (!env_prefix.empty()) absl::StrAppend(&out, ", env ", EnvName(env_prefix, flag.name));
    absl::StrAppend(&out, ")\n      ", flag.description, "\n");
  }
  return out;
}

absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

namespace internal {

absl::Status Tokenize(const std::vector<std::string>& args,
                      const std::function<bool(absl::string_view)>& known,
                      const ParseOptions& options, bool* help,
                      std::vector<Assignment>* assignments, std::vector<std::string>* positional) {
  // The first problem is reported; the scan goes on only to find a --help.
  absl::Status first;
  auto fail = [&](std::string message) {
    if (first.ok()) first = UsageError(message);
  };
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || arg == "-" || !absl::StartsWith(arg, "-")) {
      if (options.stop_at_positional) {
        positional->assign(args.begin() + i, args.end());
        break;
      }
      if (positional->size() >= options.max_positional) {
        fail(absl::StrCat("unexpected argument ", arg));
      } else {
        positional->push_back(arg);
      }
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return absl::OkStatus();
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    absl::string_view name = arg;
    if (!absl::ConsumePrefix(&name, "--")) {
      fail(absl::StrCat("unknown flag ", arg));
      continue;
    }
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != absl::string_view::npos) {
      value = std::string(name.substr(eq + 1));
      name = name.substr(0, eq);
      has_value = true;
    }
    if (!known(name)) {
      fail(absl::StrCat("unknown flag --", name));
      continue;
    }
    if (!has_value && options.is_switch && options.is_switch(name)) {
      value = "true";
      has_value = true;
    }
    // A following "--flag" is the next flag, not this one's value (--x=--y passes one).
    if (!has_value && i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--")) {
      value = args[++i];
      has_value = true;
    }
    if (!has_value) {
      fail(absl::StrCat("--", name, " needs a value"));
      continue;
    }
    assignments->push_back({std::string(name), std::move(value)});
  }
  return first;
}

const char* GetEnv(const std::string& name) { return std::getenv(name.c_str()); }

}  // namespace internal

}  // namespace calleval::cli

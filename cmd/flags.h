#pragma once

// Command-line flags of calleval and callevalctl, declared once per program as a table that both
// the parser and the --help text are generated from, so the two cannot drift. Every flag takes
// a value (--name VALUE or --name=VALUE); the help shows each flag's value in a default-built
// options struct.

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval::cli {

// One flag setting a field of an options struct T.
template <typename T>
struct Flag {
  std::string name;        // "data-dir", given as --data-dir
  std::string value_name;  // the value's placeholder in the help: "DIR", "N"
  std::string description;
  // The field as text: the help's default is get(T{}).
  std::function<std::string(const T&)> get;
  // Parses and stores a value; the error says what is wrong, the parser names the flag.
  std::function<absl::Status(absl::string_view value, T* options)> set;
  // The help's default when get() is empty (a default derived at run time, or "none").
  std::string empty_default = "none";
  bool required = false;
  // A switch stands alone: --wait means true; --wait=false is still accepted. It never takes
  // the next argument as its value.
  bool is_switch = false;
};

// The outcome of parsing: --help (or -h) anywhere wins over everything else.
struct Parsed {
  bool help = false;
  std::vector<std::string> positional;
};

struct ParseOptions {
  // When set, CALLEVAL_<NAME> style variables (prefix + NAME with '-' as '_') are read before
  // the command line, which wins.
  std::string env_prefix;
  // Positional arguments accepted; more is an error.
  size_t max_positional = 0;
  // Stops at the first positional argument and returns it and everything after it unparsed
  // (a program's flags before its command's words).
  bool stop_at_positional = false;
  // Names the switches among the known flags (set by ParseFlags from the table).
  std::function<bool(absl::string_view)> is_switch;
};

// "CALLEVAL_DATA_DIR" for prefix "CALLEVAL_" and flag "data-dir".
std::string EnvName(absl::string_view prefix, absl::string_view flag);

// The help's lines for `flags`: "  --name VALUE  (default X, env PREFIX_NAME)" then the
// description indented below it.
struct FlagHelp {
  std::string name, value_name, description, default_text;
  bool required = false;
};
std::string FormatFlagsHelp(const std::vector<FlagHelp>& flags, absl::string_view env_prefix);

// A usage error (exit status 2): one line naming the flag, command or value at fault.
absl::Status UsageError(absl::string_view message);

namespace internal {

// One "--name value" of the command line, before the table gives it meaning.
struct Assignment {
  std::string name;
  std::string value;
};

// Splits args into assignments and positionals; `known` says which names are flags. Reports
// unknown flags and flags without a value as errors, but --help anywhere as help.
absl::Status Tokenize(const std::vector<std::string>& args,
                      const std::function<bool(absl::string_view)>& known,
                      const ParseOptions& options, bool* help,
                      std::vector<Assignment>* assignments, std::vector<std::string>* positional);

const char* GetEnv(const std::string& name);

}  // namespace internal

template <typename T>
std::string FlagsHelp(const std::vector<Flag<T>>& flags, absl::string_view env_prefix = "") {
  const T defaults{};
  std::vector<FlagHelp> lines;
  for (const Flag<T>& flag : flags) {
    std::string value = flag.get(defaults);
    lines.push_back({flag.name, flag.value_name, flag.description,
                     value.empty() ? flag.empty_default : value, flag.required});
  }
  return FormatFlagsHelp(lines, env_prefix);
}

// Parses `args` into `options` (which holds the defaults). Errors are usage errors.
template <typename T>
absl::StatusOr<Parsed> ParseFlags(const std::vector<Flag<T>>& flags,
                                  const std::vector<std::string>& args,
                                  const ParseOptions& parse_options, T* options) {
  auto find = [&](absl::string_view name) -> const Flag<T>* {
    for (const Flag<T>& flag : flags) {
      if (flag.name == name) return &flag;
    }
    return nullptr;
  };
  Parsed parsed;
  std::vector<internal::Assignment> assignments;
  ParseOptions tokenize_options = parse_options;
  tokenize_options.is_switch = [&](absl::string_view name) {
    const Flag<T>* flag = find(name);
    return flag != nullptr && flag->is_switch;
  };
  absl::Status tokens = internal::Tokenize(
      args, [&](absl::string_view name) { return find(name) != nullptr; }, tokenize_options,
      &parsed.help, &assignments, &parsed.positional);
  // Help is answered even when the rest of the line, or the environment, is wrong.
  if (parsed.help) return parsed;
  if (!tokens.ok()) return tokens;
  if (!parse_options.env_prefix.empty()) {
    for (const Flag<T>& flag : flags) {
      const std::string env = EnvName(parse_options.env_prefix, flag.name);
      const char* value = internal::GetEnv(env);
      if (value == nullptr || *value == '\0') continue;
      if (absl::Status s = flag.set(value, options); !s.ok()) {
        return UsageError(absl::StrCat(env, ": ", s.message()));
      }
    }
  }
  std::vector<const Flag<T>*> given;
  for (const internal::Assignment& assignment : assignments) {
    const Flag<T>* flag = find(assignment.name);
    if (absl::Status s = flag->set(assignment.value, options); !s.ok()) {
      return UsageError(absl::StrCat("--", flag->name, ": ", s.message()));
    }
    given.push_back(flag);
  }
  for (const Flag<T>& flag : flags) {
    if (!flag.required) continue;
    bool found = false;
    for (const Flag<T>* g : given) found = found || g == &flag;
    if (!found) {
      return UsageError(absl::StrCat("--", flag.name, " ", flag.value_name, " is required"));
    }
  }
  return parsed;
}

// Table entries for the common field types.

template <typename T>
Flag<T> StringFlag(std::string name, std::string value_name, std::string T::*field,
                   std::string description, std::string empty_default = "none") {
  Flag<T> flag;
  flag.name = std::move(name);
  flag.value_name = std::move(value_name);
  flag.description = std::move(description);
  flag.get = [field](const T& o) { return o.*field; };
  flag.set = [field](absl::string_view v, T* o) {
    o->*field = std::string(v);
    return absl::OkStatus();
  };
  flag.empty_default = std::move(empty_default);
  return flag;
}

template <typename T, typename Int>
Flag<T> IntFlag(std::string name, std::string value_name, Int T::*field, int64_t min,
                int64_t max, std::string description) {
  Flag<T> flag;
  flag.name = std::move(name);
  flag.value_name = std::move(value_name);
  flag.description = std::move(description);
  flag.get = [field](const T& o) { return absl::StrCat(o.*field); };
  flag.set = [field, min, max](absl::string_view v, T* o) -> absl::Status {
    int64_t n = 0;
    if (!absl::SimpleAtoi(v, &n)) return UsageError(absl::StrCat("not an integer: ", v));
    if (n < min || n > max) {
      if (max == std::numeric_limits<Int>::max()) {
        return UsageError(absl::StrCat(v, " is out of range: at least ", min));
      }
      return UsageError(absl::StrCat(v, " is out of range: ", min, "..", max));
    }
    o->*field = static_cast<Int>(n);
    return absl::OkStatus();
  };
  return flag;
}

template <typename T>
Flag<T> BoolFlag(std::string name, bool T::*field, std::string description) {
  Flag<T> flag;
  flag.name = std::move(name);
  flag.value_name = "BOOL";
  flag.description = std::move(description);
  flag.get = [field](const T& o) -> std::string { return o.*field ? "true" : "false"; };
  flag.set = [field](absl::string_view v, T* o) -> absl::Status {
    if (!absl::SimpleAtob(v, &(o->*field))) {
      return UsageError(absl::StrCat("not a boolean (true or false): ", v));
    }
    return absl::OkStatus();
  };
  return flag;
}

// A boolean given as a bare --name (true), or --name=true / --name=false.
template <typename T>
Flag<T> SwitchFlag(std::string name, bool T::*field, std::string description) {
  Flag<T> flag = BoolFlag(std::move(name), field, std::move(description));
  flag.value_name = "";
  flag.is_switch = true;
  return flag;
}

// A duration given in whole seconds, at least `min`.
template <typename T>
Flag<T> SecondsFlag(std::string name, absl::Duration T::*field, int64_t min,
                    std::string description, int64_t max = std::numeric_limits<int64_t>::max()) {
  Flag<T> flag;
  flag.name = std::move(name);
  flag.value_name = "SECONDS";
  flag.description = std::move(description);
  flag.get = [field](const T& o) { return absl::StrCat(absl::ToInt64Seconds(o.*field)); };
  flag.set = [field, min, max](absl::string_view v, T* o) -> absl::Status {
    int64_t n = 0;
    if (!absl::SimpleAtoi(v, &n)) return UsageError(absl::StrCat("not an integer: ", v));
    if (n < min || n > max) {
      if (max == std::numeric_limits<int64_t>::max()) {
        return UsageError(absl::StrCat(v, " is out of range: at least ", min));
      }
      return UsageError(absl::StrCat(v, " is out of range: ", min, "..", max));
    }
    o->*field = absl::Seconds(n);
    return absl::OkStatus();
  };
  return flag;
}

}  // namespace calleval::cli

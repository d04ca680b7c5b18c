#include "tools/ctl/command.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/control/absl_view.h"
#include "lib/control/protocol.h"

namespace metaroce::ctl {
namespace {

using control::Json;

// Debian's Abseil has its own string_view type.

absl::Status UsageError(std::string_view message) {
  return absl::InvalidArgumentError(control::AbslView(message));
}

// How an argument's text becomes a parameter value.
enum class Kind {
  kUint,     // an id: unsigned integer
  kCount,    // an unsigned integer >= 1
  kString,   // non-empty text (an address, an interface)
  kPlanes,   // P[,P...]: array of unsigned integers
  kProfile,  // metaroce | gbn | reorder
};

struct Operand {        // positional, in order
  std::string_view name;   // as in the synopsis: "ID"
  std::string_view param;  // the method's parameter: "id"
  Kind kind;
  bool required;
};

struct Keyword {        // "paths N"
  std::string_view word;
  std::string_view param;
  Kind kind;
};

struct CommandSpec {
  std::string_view object;
  std::string_view command;
  std::vector<std::string_view> aliases;
  std::vector<Operand> operands;
  std::vector<Keyword> keywords;
  std::string_view synopsis;  // what follows "mrctl OBJECT COMMAND"
};

// docs/control-protocol.md, "Methods": one command per method, named alike.
const std::vector<CommandSpec>& Commands() {
  static const auto* const kCommands = new std::vector<CommandSpec>{
      {"link", "show", {"list", "ls"},
       {{"NAME", "name", Kind::kString, false}},
       {{"dev", "name", Kind::kString}},
       "[ [dev] NAME ]"},
      {"conn", "add", {},
       {{"PEER", "peer", Kind::kString, true}},
       {{"paths", "paths", Kind::kCount},
        {"planes", "planes", Kind::kPlanes},
        {"profile", "profile", Kind::kProfile}},
       "PEER [ paths N ] [ planes P[,P...] ] [ profile { metaroce | gbn | reorder } ]"},
      {"conn", "del", {"delete"}, {{"ID", "id", Kind::kUint, true}}, {}, "ID"},
      {"conn", "show", {"list", "ls"},
       {{"ID", "id", Kind::kUint, false}},
       {{"peer", "peer", Kind::kString}},
       "[ ID ] [ peer ADDR ]"},
      {"path", "show", {"list", "ls"},
       {{"CONN", "conn", Kind::kUint, true}, {"PATH", "path", Kind::kUint, false}},
       {},
       "CONN [ PATH ]"},
      {"path", "rotate", {},
       {{"CONN", "conn", Kind::kUint, true}, {"PATH", "path", Kind::kUint, true}},
       {},
       "CONN PATH"},
      {"path", "events", {}, {{"CONN", "conn", Kind::kUint, false}}, {}, "[ CONN ]"},
      {"stat", "show", {"list", "ls"},
       {{"NAME", "name", Kind::kString, false}},
       {{"dev", "name", Kind::kString}, {"link", "name", Kind::kString}},
       "[ [dev] NAME ]"},
      {"daemon", "show", {}, {}, {}, ""},
  };
  return *kCommands;
}

constexpr std::string_view kObjects[] = {"link", "conn", "path", "stat", "daemon"};

// A word and the name it stands for ("ls" -> "show", "statistic" -> "stat").
struct Name {
  std::string_view word;
  std::string_view canonical;
};

std::vector<Name> ObjectNames() {
  std::vector<Name> names;
  for (std::string_view o : kObjects) names.push_back({o, o});
  names.push_back({"statistic", "stat"});  // as `rdma statistic`
  names.push_back({"help", "help"});
  return names;
}

std::vector<Name> CommandNames(std::string_view object) {
  std::vector<Name> names;
  for (const CommandSpec& c : Commands()) {
    if (c.object != object) continue;
    names.push_back({c.command, c.command});
    for (std::string_view alias : c.aliases) names.push_back({alias, c.command});
  }
  names.push_back({"help", "help"});
  return names;
}

// "a, b or c"
std::string JoinOr(const std::vector<std::string_view>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out.append(items[i]);
  }
  return out;
}

std::vector<std::string_view> Canonicals(const std::vector<Name>& names) {
  std::vector<std::string_view> out;
  for (const Name& n : names) {
    if (n.word == n.canonical) out.push_back(n.word);
  }
  return out;
}

// The exact word, else the one name it is a prefix of. `what` and `where` place the word in
// messages: unknown command "foo" for conn.
absl::StatusOr<std::string_view> Resolve(std::string_view token, const std::vector<Name>& names,
                                         std::string_view what, std::string_view where = "") {
  for (const Name& n : names) {
    if (n.word == token) return n.canonical;
  }
  std::vector<std::string_view> matches;
  for (const Name& n : names) {
    if (!token.empty() && n.word.substr(0, token.size()) == token &&
        std::find(matches.begin(), matches.end(), n.canonical) == matches.end()) {
      matches.push_back(n.canonical);
    }
  }
  if (matches.size() == 1) return matches[0];
  if (matches.empty()) {
    return UsageError(absl::StrCat("unknown ", control::AbslView(what), " \"", control::AbslView(token), "\"", control::AbslView(where),
                                   " (expected ", JoinOr(Canonicals(names)), ")"));
  }
  return UsageError(absl::StrCat("ambiguous ", control::AbslView(what), " \"", control::AbslView(token), "\"", control::AbslView(where), " (",
                                 JoinOr(matches), ")"));
}

std::optional<uint64_t> ParseUint(std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  if (text.empty() || text[0] < '0' || text[0] > '9') return std::nullopt;
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

absl::StatusOr<Json> ParsePlanes(std::string_view name, std::string_view text) {
  Json planes = Json::MakeArray();
  for (absl::string_view item : absl::StrSplit(control::AbslView(text), ',')) {
    std::optional<uint64_t> plane = ParseUint(std::string_view(item.data(), item.size()));
    if (!plane) {
      return UsageError(absl::StrCat(control::AbslView(name), " must be plane numbers separated by commas (e.g. 0,1), "
                                "not \"", control::AbslView(text), "\""));
    }
    planes.Push(*plane);
  }
  return planes;
}

// `name` is how the argument is called in the synopsis ("ID", "paths").
absl::StatusOr<Json> Convert(Kind kind, std::string_view name, std::string_view text) {
  const std::string quoted = absl::StrCat("\"", control::AbslView(text), "\"");
  switch (kind) {
    case Kind::kUint:
    case Kind::kCount: {
      std::optional<uint64_t> v = ParseUint(text);
      if (!v) return UsageError(absl::StrCat(control::AbslView(name), " must be an unsigned integer, not ", quoted));
      if (kind == Kind::kCount && *v == 0) {
        return UsageError(absl::StrCat(control::AbslView(name), " must be at least 1, not ", quoted));
      }
      return Json(*v);
    }
    case Kind::kString:
      if (text.empty()) return UsageError(absl::StrCat(control::AbslView(name), " must not be empty"));
      return Json(text);
    case Kind::kPlanes:
      return ParsePlanes(name, text);
    case Kind::kProfile:
      if (text == "metaroce" || text == "gbn" || text == "reorder") return Json(text);
      return UsageError(absl::StrCat(control::AbslView(name), " must be metaroce, gbn or reorder, not ", quoted));
  }
  return UsageError("unreachable");
}

const Keyword* FindKeyword(const CommandSpec& spec, std::string_view word) {
  for (const Keyword& k : spec.keywords) {
    if (k.word == word) return &k;
  }
  return nullptr;
}

std::string Title(const CommandSpec& spec) {
  return absl::StrCat(control::AbslView(spec.object), " ", control::AbslView(spec.command));
}

// A word that is not a keyword where only keywords (or nothing) can come.
absl::Status UnexpectedWord(const CommandSpec& spec, std::string_view word) {
  const bool looks_like_keyword = !word.empty() && !(word[0] >= '0' && word[0] <= '9');
  if (spec.keywords.empty() || !looks_like_keyword) {
    return UsageError(absl::StrCat("unexpected argument \"", control::AbslView(word), "\" for ", Title(spec)));
  }
  std::vector<std::string_view> words;
  for (const Keyword& k : spec.keywords) words.push_back(k.word);
  return UsageError(absl::StrCat("unknown keyword \"", control::AbslView(word), "\" for ", Title(spec), " (expected ",
                            JoinOr(words), ")"));
}

absl::Status CheckRequired(const CommandSpec& spec, const Json& params) {
  std::vector<std::string_view> missing;
  for (const Operand& op : spec.operands) {
    if (op.required && params.Find(op.param) == nullptr) missing.push_back(op.name);
  }
  if (missing.empty()) return absl::OkStatus();
  std::string names;
  for (std::string_view name : missing) {
    if (!names.empty()) names += " and ";
    names.append(name);
  }
  return UsageError(absl::StrCat(Title(spec), " needs ", names));
}

class OperandParser {
 public:
  explicit OperandParser(const CommandSpec& spec) : spec_(spec) {}

  absl::StatusOr<Json> Parse(const std::vector<std::string>& words) {
    for (size_t i = 0; i < words.size(); ++i) {
      absl::Status st;
      if (const Keyword* k = FindKeyword(spec_, words[i])) {
        if (i + 1 == words.size()) {
          return UsageError(absl::StrCat("keyword \"", control::AbslView(k->word), "\" needs a value"));
        }
        st = TakeKeyword(*k, words[++i]);
      } else {
        st = TakePositional(words[i]);
      }
      if (!st.ok()) return st;
    }
    if (absl::Status st = CheckRequired(spec_, params_); !st.ok()) return st;
    return params_;
  }

 private:
  absl::Status TakeKeyword(const Keyword& k, std::string_view value) {
    if (keywords_used_.count(k.word) > 0) {
      return UsageError(absl::StrCat("duplicate keyword \"", control::AbslView(k.word), "\""));
    }
    if (params_.Find(k.param) != nullptr) {
      return UsageError(absl::StrCat(control::AbslView(OperandName(k.param)), " given twice (as \"", control::AbslView(k.word),
                                "\" too)"));
    }
    absl::StatusOr<Json> v = Convert(k.kind, k.word, value);
    if (!v.ok()) return v.status();
    keywords_used_.insert(k.word);
    params_[k.param] = *std::move(v);
    return absl::OkStatus();
  }

  absl::Status TakePositional(std::string_view word) {
    while (next_ < spec_.operands.size() && params_.Find(spec_.operands[next_].param) != nullptr) {
      ++next_;  // already given through its keyword ("dev NAME")
    }
    if (next_ == spec_.operands.size()) return UnexpectedWord(spec_, word);
    const Operand& op = spec_.operands[next_++];
    const bool numeric = !word.empty() && word[0] >= '0' && word[0] <= '9';
    if (op.kind == Kind::kUint && !numeric && !spec_.keywords.empty()) {
      return UnexpectedWord(spec_, word);  // "conn show pear X": a misspelt keyword
    }
    absl::StatusOr<Json> v = Convert(op.kind, op.name, word);
    if (!v.ok()) return v.status();
    params_[op.param] = *std::move(v);
    return absl::OkStatus();
  }

  std::string_view OperandName(std::string_view param) const {
    for (const Operand& op : spec_.operands) {
      if (op.param == param) return op.name;
    }
    return param;
  }

  const CommandSpec& spec_;
  Json params_ = Json::MakeObject();
  std::set<std::string_view> keywords_used_;
  size_t next_ = 0;
};

const CommandSpec& FindSpec(std::string_view object, std::string_view command) {
  for (const CommandSpec& c : Commands()) {
    if (c.object == object && c.command == command) return c;
  }
  return Commands().front();  // unreachable: names come from Commands()
}

// Options may stand anywhere; the other words are returned in order.
struct SplitWords {
  Options options;
  bool help = false;
  bool version = false;
  std::vector<std::string> words;
};

absl::Status ShortFlags(std::string_view arg, SplitWords& out) {
  for (char c : arg.substr(1)) {
    switch (c) {
      case 'j': out.options.json = true; break;
      case 'p': out.options.pretty = out.options.json = true; break;
      case 'd': out.options.details = true; break;
      case 'V': out.version = true; break;
      case 'h': out.help = true; break;
      default: return UsageError(absl::StrCat("unknown option \"", control::AbslView(arg), "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SplitWords> Split(const std::vector<std::string>& args,
                                 std::string_view default_socket) {
  SplitWords out;
  out.options.socket_path = std::string(default_socket);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-') {
      out.words.push_back(a);
    } else if (a == "--json") {
      out.options.json = true;
    } else if (a == "--pretty") {
      out.options.pretty = out.options.json = true;
    } else if (a == "--details") {
      out.options.details = true;
    } else if (a == "--version") {
      out.version = true;
    } else if (a == "--help") {
      out.help = true;
    } else if (a == "-s" || a == "--socket") {
      if (i + 1 == args.size()) return UsageError(absl::StrCat("option ", a, " needs a PATH"));
      out.options.socket_path = args[++i];
    } else if (a.rfind("--socket=", 0) == 0) {
      out.options.socket_path = a.substr(9);
    } else if (a[1] == '-') {
      return UsageError(absl::StrCat("unknown option \"", a, "\""));
    } else if (absl::Status st = ShortFlags(a, out); !st.ok()) {
      return st;
    }
  }
  if (out.options.socket_path.empty()) return UsageError("the socket PATH must not be empty");
  return out;
}

Invocation Help(const SplitWords& split, std::string_view object) {
  Invocation inv;
  inv.action = Invocation::Action::kHelp;
  inv.options = split.options;
  inv.help_object = std::string(object);
  return inv;
}

absl::StatusOr<Invocation> ParseWords(const SplitWords& split) {
  const std::vector<std::string>& words = split.words;
  if (words.empty()) {
    return UsageError(absl::StrCat("missing OBJECT (expected ", JoinOr(Canonicals(ObjectNames())),
                              ")"));
  }
  absl::StatusOr<std::string_view> object = Resolve(words[0], ObjectNames(), "object");
  if (!object.ok()) return object.status();
  if (*object == "help") {
    if (words.size() < 2) return Help(split, "");
    absl::StatusOr<std::string_view> topic = Resolve(words[1], ObjectNames(), "object");
    if (!topic.ok()) return topic.status();
    return Help(split, *topic == "help" ? "" : *topic);
  }
  const std::string_view command_word =
      words.size() > 1 ? std::string_view(words[1]) : std::string_view("show");
  absl::StatusOr<std::string_view> command =
      Resolve(command_word, CommandNames(*object), "command", absl::StrCat(" for ", control::AbslView(*object)));
  if (!command.ok()) return command.status();
  if (*command == "help" || (words.size() > 2 && words[2] == "help")) return Help(split, *object);
  const CommandSpec& spec = FindSpec(*object, *command);
  const std::vector<std::string> operands(words.begin() + std::min<size_t>(words.size(), 2),
                                          words.end());
  absl::StatusOr<Json> params = OperandParser(spec).Parse(operands);
  if (!params.ok()) return params.status();
  Invocation inv;
  inv.options = split.options;
  inv.method = absl::StrCat(control::AbslView(spec.object), ".", control::AbslView(spec.command));
  inv.params = *std::move(params);
  return inv;
}

std::string SynopsisLines(std::string_view object, std::string_view indent) {
  std::string out;
  for (const CommandSpec& c : Commands()) {
    if (!object.empty() && c.object != object) continue;
    absl::StrAppend(&out, control::AbslView(indent), "mrctl ", Title(c));
    if (!c.synopsis.empty()) absl::StrAppend(&out, " ", control::AbslView(c.synopsis));
    out += "\n";
  }
  return out;
}

}  // namespace

absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args,
                                            std::string_view default_socket) {
  absl::StatusOr<SplitWords> split = Split(args, default_socket);
  if (!split.ok()) return split.status();
  if (split->help) {
    if (split->words.empty()) return Help(*split, "");
    absl::StatusOr<std::string_view> object = Resolve(split->words[0], ObjectNames(), "object");
    if (!object.ok()) return object.status();
    return Help(*split, *object == "help" ? "" : *object);
  }
  if (split->version) {
    Invocation inv;
    inv.action = Invocation::Action::kVersion;
    inv.options = split->options;
    return inv;
  }
  return ParseWords(*split);
}

std::string Usage() {
  return absl::StrCat(
      "Usage: mrctl [ OPTIONS ] OBJECT { COMMAND | help }\n"
      "       mrctl help [ OBJECT ]\n"
      "where  OBJECT := { link | conn | path | stat | daemon }\n"
      "       OPTIONS := { -j[son] | -p[retty] | -d[etails] | -s[ocket] PATH | -V[ersion] |\n"
      "                    -h[elp] }\n"
      "\n"
      "Commands:\n",
      SynopsisLines("", "  "),
      "\n"
      "Options:\n"
      "  -j, --json          print the result as one JSON document (\"version\": 1 first)\n"
      "  -p, --pretty        indent the JSON document (implies -j)\n"
      "  -d, --details       conn show: each connection's counters too\n"
      "  -s, --socket PATH   metaroced's control socket (default: $METAROCE_SOCKET, else\n"
      "                      ", control::AbslView(control::kDefaultSocketPath), ")\n"
      "  -V, --version       print mrctl's version\n"
      "  -h, --help          print this help\n"
      "\n"
      "Objects and commands may be abbreviated to a unique prefix (\"mrctl c s\" is\n"
      "\"mrctl conn show\"); list and ls mean show; a missing command means show.\n"
      "Exit status: 0 success; 1 metaroced refused or could not be reached; 2 bad usage.\n");
}

std::string ObjectUsage(std::string_view object) {
  std::string lines = SynopsisLines(object, "");
  if (lines.empty()) return Usage();
  std::string out;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(lines, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, first ? "Usage: " : "       ", line, "\n");
    first = false;
  }
  absl::StrAppend(&out, "       mrctl ", control::AbslView(object), " help\n");
  return out;
}

}  // namespace metaroce::ctl

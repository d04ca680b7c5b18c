// mrperf: perftest's shape over the MetaRoCE stack, with its raw AF_XDP ceiling and kernel UDP
// baseline (tools/perf/README.md).
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "tools/perf/baseline_bench.h"
#include "tools/perf/common.h"
#include "tools/perf/options.h"
#include "tools/perf/report.h"
#include "tools/perf/stack_bench.h"

namespace {

using metaroce::perf::JsonValue;
using metaroce::perf::PerfOptions;

void OnSignal(int) {
  metaroce::perf::StopFlag().store(true);
}

absl::StatusOr<JsonValue> RunServer(const PerfOptions& o,
                                    std::shared_ptr<metaroce::api::MemoryPairBroker> broker,
                                    std::function<void()> ready) {
  if (metaroce::perf::IsStack(o.test)) return metaroce::perf::RunStackServer(o, broker, ready);
  return metaroce::perf::RunBaselineServer(o, broker, ready);
}

absl::StatusOr<JsonValue> RunClient(const PerfOptions& o,
                                    std::shared_ptr<metaroce::api::MemoryPairBroker> broker) {
  if (metaroce::perf::IsStack(o.test)) return metaroce::perf::RunStackClient(o, broker);
  return metaroce::perf::RunBaselineClient(o, broker);
}

// Exit status: 0, or 1 when the run failed or any operation failed or any data did not verify
// (the JSON document is written either way when there is one).
int Finish(const PerfOptions& o, const absl::StatusOr<JsonValue>& doc) {
  if (!doc.ok()) {
    std::fprintf(stderr, "mrperf: %s\n", std::string(doc.status().message()).c_str());
    return 1;
  }
  if (!metaroce::perf::EmitJson(o, *doc)) return 1;
  if (metaroce::perf::StopRequested()) {
    std::fprintf(stderr, "mrperf: interrupted\n");
    return 130;
  }
  const std::string text = doc->Dump();
  auto count = [&text](const char* key) -> unsigned long {
    // The summary's counters (the last occurrence of the key is the summary's). Compact JSON
    // has no space after the colon.
    const std::string quoted = std::string("\"") + key + "\":";
    const size_t at = text.rfind(quoted);
    return at == std::string::npos ? 0 : std::strtoul(text.c_str() + at + quoted.size(), nullptr, 10);
  };
  const unsigned long failed = count("failed_ops"), errors = count("data_errors");
  if (failed > 0 || errors > 0) {
    std::fprintf(stderr, "mrperf: %lu failed operation(s), %lu data error(s)\n", failed, errors);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(metaroce::perf::Usage().c_str(), stdout);
      return 0;
    }
  }
  absl::StatusOr<PerfOptions> options = metaroce::perf::ParseCommandLine(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "mrperf: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const PerfOptions& o = *options;
  if (o.port_kind == metaroce::perf::PortKindFlag::kMemory) {
    // In-process: the server on a thread, the client here, joined by memory port pairs.
    auto broker = std::make_shared<metaroce::api::MemoryPairBroker>();
    std::optional<absl::StatusOr<JsonValue>> server_result;
    std::thread server([&] {
      metaroce::perf::SetTablesQuiet(true);
      server_result = RunServer(o, broker, nullptr);
    });
    absl::StatusOr<JsonValue> client = RunClient(o, broker);
    if (!client.ok()) metaroce::perf::StopFlag().store(true);
    server.join();
    if (client.ok() && server_result && !server_result->ok()) {
      std::fprintf(stderr, "mrperf: server: %s\n",
                   std::string(server_result->status().message()).c_str());
    }
    return Finish(o, client);
  }
  if (o.is_client()) return Finish(o, RunClient(o, nullptr));
  return Finish(o, RunServer(o, nullptr, nullptr));
}

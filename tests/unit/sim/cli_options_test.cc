#include "tools/sim/cli_options.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::sim {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<CommandLine> Parse(std::vector<const char*> args) {
  return ParseCommandLine(std::span<const char* const>(args.data(), args.size()));
}

TEST(CliOptions_Parse, MapsFlagsOntoConfig) {
  auto cl = Parse({"--paths=4", "--connections", "2", "--size=64K", "--op=write_imm",
                   "--transport=reorder", "--loss=0.01", "--slow=1:25,2:50",
                   "--blackhole", "0@100-250.5", "--json", "--ordered", "--delay-us=3.5",
                   "--ack-every=16"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const ScenarioConfig& c = cl->config;
  EXPECT_EQ(c.physical_paths, 4);
  EXPECT_EQ(c.connections, 2u);
  EXPECT_EQ(c.message_bytes, 64u * 1024);
  EXPECT_EQ(c.op, Operation::kWriteImm);
  EXPECT_EQ(c.transport, TransportKind::kReorderBuffer);
  EXPECT_DOUBLE_EQ(c.loss, 0.01);
  ASSERT_EQ(c.slow_paths.size(), 2u);
  EXPECT_EQ(c.slow_paths[1].path, 2);
  EXPECT_DOUBLE_EQ(c.slow_paths[1].rate_gbps, 50);
  ASSERT_EQ(c.blackholes.size(), 1u);
  EXPECT_EQ(c.blackholes[0].window.begin.ns, 100'000);
  EXPECT_EQ(c.blackholes[0].window.end.ns, 250'500);
  EXPECT_EQ(c.delay.count(), 3500);
  EXPECT_TRUE(c.ordered_completion);
  EXPECT_EQ(c.ack_every, 16u);
  EXPECT_TRUE(cl->json);
}

TEST(CliOptions_Parse, AckEveryInTheLeafSpineModelToo) {
  auto cl = Parse({"--topology=leaf-spine", "--ack-every=16"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->cluster);
  EXPECT_EQ(cl->cluster_config.ack_every, 16u);
}

// issue 36 §4: a flag that means the same in both models works in both.
TEST(CliOptions_Parse, QuietAndLossInBothModels) {
  auto pair = Parse({"--quiet", "--loss=0.02"});
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_TRUE(pair->quiet);
  EXPECT_DOUBLE_EQ(pair->config.loss, 0.02);
  auto cluster = Parse({"--topology=leaf-spine", "--quiet", "--loss=0.02"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_TRUE(cluster->quiet);
  EXPECT_DOUBLE_EQ(cluster->cluster_config.fabric.loss_probability, 0.02);
}

TEST(CliOptions_Parse, GoBackNHasOneLogicalPath) {
  auto cl = Parse({"--transport=gbn", "--paths=8"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->config.EffectiveLogicalPaths(), 1);
}

TEST(CliOptions_Parse, PathLossCeMarkStepsAndSamples) {
  auto cl = Parse({"--paths=8", "--path-loss=0:0.01,3:0.05", "--path-loss", "5:0",
                   "--ce-mark=2:1@1000-9000.5,4:0.25", "--steps=200", "--messages=64",
                   "--sample-us=12.5", "--max-path-events=1000"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const ScenarioConfig& c = cl->config;
  ASSERT_EQ(c.path_losses.size(), 3u);
  EXPECT_EQ(c.path_losses[1].path, 3);
  EXPECT_DOUBLE_EQ(c.path_losses[1].probability, 0.05);
  EXPECT_DOUBLE_EQ(c.PathLossProbability(0, false), 0.01);
  EXPECT_DOUBLE_EQ(c.PathLossProbability(0, true), 0.01);  // both directions
  EXPECT_DOUBLE_EQ(c.PathLossProbability(1, false), 0);
  ASSERT_EQ(c.ce_marks.size(), 2u);
  EXPECT_EQ(c.ce_marks[0].path, 2);
  EXPECT_DOUBLE_EQ(c.ce_marks[0].probability, 1);
  ASSERT_TRUE(c.ce_marks[0].window.has_value());
  EXPECT_EQ(c.ce_marks[0].window->begin.ns, 1'000'000);
  EXPECT_EQ(c.ce_marks[0].window->end.ns, 9'000'500);
  EXPECT_FALSE(c.ce_marks[1].window.has_value());
  EXPECT_EQ(c.steps, 200u);
  EXPECT_EQ(c.TotalMessages(), 200u * 64);
  EXPECT_EQ(c.sample_interval.count(), 12'500);
  EXPECT_EQ(c.max_path_events, 1000u);
}

TEST(CliOptions_Parse, PathLossOverridesGlobalLossOnItsPathOnly) {
  auto cl = Parse({"--paths=4", "--loss=0.02", "--ack-loss=0.03", "--path-loss=1:0.5"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_DOUBLE_EQ(cl->config.PathLossProbability(0, false), 0.02);
  EXPECT_DOUBLE_EQ(cl->config.PathLossProbability(0, true), 0.03);
  EXPECT_DOUBLE_EQ(cl->config.PathLossProbability(1, false), 0.5);
  EXPECT_DOUBLE_EQ(cl->config.PathLossProbability(1, true), 0.5);
  EXPECT_EQ(cl->config.TotalMessages(), 64u);  // no steps: --messages in all
}

// --cc dcqcn brings DCQCN's RED marking (the paper's 5 KiB, 200 KiB, 1 %) unless the marking is
// given, in either order; --ecn-red sets all three; dcqcn is go-back-N's only.
TEST(CliOptions_Parse, DcqcnMarksRedLikeUnlessTheMarkingIsGiven) {
  auto cl = Parse({"--topology=leaf-spine", "--transport=gbn", "--cc=dcqcn"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->cluster_config.cc, CongestionKind::kDcqcn);
  EXPECT_EQ(cl->cluster_config.fabric.ecn_threshold_bytes, 5u * 1024);
  EXPECT_EQ(cl->cluster_config.fabric.ecn_kmax_bytes, 200u * 1024);
  EXPECT_DOUBLE_EQ(cl->cluster_config.fabric.ecn_pmax, 0.01);
  for (auto args : {std::vector<const char*>{"--topology=leaf-spine", "--ecn-kb=32",
                                             "--transport=gbn", "--cc=dcqcn"},
                    std::vector<const char*>{"--topology=leaf-spine", "--transport=gbn",
                                             "--cc=dcqcn", "--ecn-kb=32"}}) {
    auto given = Parse(args);
    ASSERT_TRUE(given.ok()) << given.status();
    EXPECT_EQ(given->cluster_config.fabric.ecn_threshold_bytes, 32u * 1024);
    EXPECT_DOUBLE_EQ(given->cluster_config.fabric.ecn_pmax, 0) << "step marking, as asked";
  }
  auto red = Parse({"--topology=leaf-spine", "--ecn-red=10:100:0.2"});
  ASSERT_TRUE(red.ok()) << red.status();
  EXPECT_EQ(red->cluster_config.cc, CongestionKind::kWindow);
  EXPECT_EQ(red->cluster_config.fabric.ecn_threshold_bytes, 10u * 1024);
  EXPECT_EQ(red->cluster_config.fabric.ecn_kmax_bytes, 100u * 1024);
  EXPECT_DOUBLE_EQ(red->cluster_config.fabric.ecn_pmax, 0.2);
  EXPECT_THAT(Parse({"--topology=leaf-spine", "--ecn-red=100:10:0.2"}).status().message(),
              HasSubstr("--ecn-red"));
  EXPECT_THAT(Parse({"--topology=leaf-spine", "--ecn-red=1:10:0"}).status().message(),
              HasSubstr("--ecn-red"));
  EXPECT_THAT(Parse({"--topology=leaf-spine", "--cc=cubic"}).status().message(),
              HasSubstr("--cc"));
  EXPECT_THAT(Parse({"--topology=leaf-spine", "--cc=dcqcn"}).status().message(),
              HasSubstr("--transport gbn"));
}

TEST(CliOptions_Errors, NewFlagsNameTheFlag) {
  EXPECT_THAT(Parse({"--path-loss=0"}).status().message(), HasSubstr("--path-loss"));
  EXPECT_THAT(Parse({"--path-loss=x:0.1"}).status().message(), HasSubstr("--path-loss"));
  EXPECT_THAT(Parse({"--paths=2", "--path-loss=2:0.1"}).status().message(),
              HasSubstr("--path-loss names a path"));
  EXPECT_THAT(Parse({"--path-loss=0:1"}).status().message(), HasSubstr("--path-loss"));
  EXPECT_THAT(Parse({"--ce-mark=0:0.5@9-1"}).status().message(), HasSubstr("--ce-mark"));
  EXPECT_THAT(Parse({"--ce-mark=0:1.5"}).status().message(), HasSubstr("--ce-mark"));
  EXPECT_THAT(Parse({"--ce-mark=0:0.5@1"}).status().message(), HasSubstr("--ce-mark"));
  EXPECT_THAT(Parse({"--steps=-1"}).status().message(), HasSubstr("--steps"));
  EXPECT_THAT(Parse({"--sample-us=-5"}).status().message(), HasSubstr("--sample-us"));
}

TEST(CliOptions_Errors, NameTheFlag) {
  EXPECT_THAT(Parse({"--bogus=1"}).status().message(), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(Parse({"--paths=x"}).status().message(), HasSubstr("--paths=x"));
  EXPECT_THAT(Parse({"--op=read"}).status().message(), HasSubstr("write, send or write_imm"));
  EXPECT_THAT(Parse({"--messages"}).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(Parse({"--loss=1.5"}).status().message(), HasSubstr("--loss"));
  EXPECT_THAT(Parse({"--paths=2", "--slow=3:10"}).status().message(), HasSubstr("--slow"));
  EXPECT_THAT(Parse({"--blackhole=0@5-1"}).status().message(), HasSubstr("--blackhole"));
  // The PATH:VALUE and T1-T2 forms the list flags share.
  EXPECT_THAT(Parse({"--slow=1"}).status().message(), HasSubstr("PATH:GBPS"));
  EXPECT_THAT(Parse({"--slow=1:inf"}).status().message(), HasSubstr("PATH:GBPS"));
  EXPECT_THAT(Parse({"--slow=70000:10"}).status().message(), HasSubstr("PATH:GBPS"));
  EXPECT_THAT(Parse({"--path-loss=0:0.1:2"}).status().message(), HasSubstr("PATH:PROB"));
  EXPECT_THAT(Parse({"--blackhole=0@1"}).status().message(), HasSubstr("PATH@T1-T2"));
  EXPECT_THAT(Parse({"--blackhole=0@1-x"}).status().message(), HasSubstr("PATH@T1-T2"));
  EXPECT_THAT(Parse({"--ce-mark=0@1-2"}).status().message(), HasSubstr("PATH:PROB[@T1-T2]"));
  EXPECT_THAT(Parse({"positional"}).status().message(), HasSubstr("unexpected argument"));
}

TEST(CliOptions_Help, ListsEveryFlag) {
  auto cl = Parse({"--help"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->help);
  const std::string usage = UsageText();
  for (const char* flag : {"--paths", "--transport", "--blackhole", "--recv-delay-us", "--json",
                           "--path-loss", "--ce-mark", "--steps", "--sample-us",
                           "--max-path-events"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace metaroce::sim

// The load a worker's /metrics text gives the fleet, under each engine's names (tierserve's,
// vLLM's, llama.cpp's: as their servers print them), with labels, comments and junk.
#include "gateway/workers.h"

#include <gtest/gtest.h>

namespace ts::gateway {
namespace {

TEST(WorkerMetrics, EachEnginesNamesAndNothingElse) {
  // tierserve serve
  WorkerLoad l = parse_worker_metrics(
      "# HELP tierserve_num_requests_waiting Requests waiting.\n# TYPE tierserve_num_requests_waiting gauge\n"
      "tierserve_num_requests_waiting 3\ntierserve_num_requests_running 5\ntierserve_kv_cache_usage_ratio 0.25\n");
  EXPECT_TRUE(l.up);
  EXPECT_DOUBLE_EQ(l.waiting, 3);
  EXPECT_DOUBLE_EQ(l.running, 5);
  EXPECT_DOUBLE_EQ(l.kv_usage, 0.25);
  // vLLM: labelled, and the pre-v1 KV name
  l = parse_worker_metrics(
      "vllm:num_requests_waiting{model_name=\"m\"} 7.0\nvllm:num_requests_running{model_name=\"m\"} 2.0\n"
      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n");
  EXPECT_DOUBLE_EQ(l.waiting, 7);
  EXPECT_DOUBLE_EQ(l.running, 2);
  EXPECT_DOUBLE_EQ(l.kv_usage, 0.5);
  // llama.cpp's server with --metrics (no KV gauge in the pinned version)
  l = parse_worker_metrics("llamacpp:prompt_tokens_total 10\nllamacpp:requests_processing 1\nllamacpp:requests_deferred 4\n");
  EXPECT_DOUBLE_EQ(l.waiting, 4);
  EXPECT_DOUBLE_EQ(l.running, 1);
  EXPECT_DOUBLE_EQ(l.kv_usage, 0);
  // A name that only starts like one, junk values, an out-of-range KV: ignored or clamped.
  l = parse_worker_metrics(
      "tierserve_num_requests_waiting_total 99\ntierserve_num_requests_waiting nan\ntierserve_num_requests_running x\n"
      "tierserve_kv_cache_usage_ratio 7\n");
  EXPECT_DOUBLE_EQ(l.waiting, 0);
  EXPECT_DOUBLE_EQ(l.running, 0);
  EXPECT_DOUBLE_EQ(l.kv_usage, 1);
  l = parse_worker_metrics("");
  EXPECT_DOUBLE_EQ(l.waiting + l.running + l.kv_usage, 0);
}

}  // namespace
}  // namespace ts::gateway

// A model on a cluster, the cluster's kernel profile and a training: the case the search tests plan.
#pragma once

#include <cstdint>
#include <string>

#include "cluster.h"
#include "hardware_profile.h"
#include "model_presets.h"
#include "training.h"

namespace shardplan::testing {

struct SearchCase {
  ModelSpec model;
  Cluster cluster;
  HardwareProfile profile;
  TrainingConfig training;
  SearchCase(const std::string& model_name, const std::string& cluster_text, std::int64_t seq_len)
      : model(preset_model(model_name)), cluster(parse_cluster(cluster_text, HardwareCatalog::builtin())),
        profile(profile_from_cluster(cluster)) {
    training.seq_len = seq_len;
  }
};

}  // namespace shardplan::testing

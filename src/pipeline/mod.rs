//! The loader pipeline: sampler → shard → bucket → batch → prefetch → collate.

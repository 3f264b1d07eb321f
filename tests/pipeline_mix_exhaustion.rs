//! Exhausted parts behave as documented, against a plain model: under drop every record of every
//! part appears exactly `part_epochs` times; under stop the stream is the restart stream cut
//! right before the first draw that would overdraw a part; under restart each part's `c`-th
//! draw is its own sampler's position `c mod L` of epoch `c div L`, so every part epoch is a
//! permutation of the part.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use proptest::prelude::*;
use zrecord::pipeline::{Exhausted, Mix, MixConfig, SamplerMode, Stage};

fn stream(mix: &Mix) -> Vec<u64> {
    mix.clone()
        .cursor()
        .into_iter()
        .map(|s| s.unwrap().index)
        .collect()
}

fn mix(lens: &[u64], weights: &[f64], exhausted: Exhausted, seed: u64, part_epochs: u64) -> Mix {
    let cfg = MixConfig::new(weights.to_vec())
        .exhausted(exhausted)
        .seed(seed)
        .part_epochs(part_epochs)
        .epochs(Some(1));
    Mix::new(lens, cfg).unwrap()
}

/// The restart stream's first `n` items (epochs run on, so the schedule continues).
fn restart_prefix(lens: &[u64], weights: &[f64], seed: u64, n: u64) -> Vec<u64> {
    let cfg = MixConfig::new(weights.to_vec())
        .exhausted(Exhausted::Restart)
        .seed(seed)
        .epochs(None);
    let m = Mix::new(lens, cfg).unwrap();
    m.cursor()
        .into_iter()
        .take(n as usize)
        .map(|s| s.unwrap().index)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn drop_serves_every_record_part_epochs_times(
        weights in prop::collection::vec(0.001..10.0f64, 1..=5),
        lens in prop::collection::vec(0..300u64, 5),
        seed in any::<u64>(),
        part_epochs in 1..4u64,
    ) {
        let lens = &lens[..weights.len()];
        let m = mix(lens, &weights, Exhausted::Drop, seed, part_epochs);
        let total: u64 = lens.iter().sum();
        prop_assert_eq!(m.epochs(), Some(1));
        prop_assert_eq!(m.epoch_len(), total * part_epochs);
        let got = stream(&m);
        let mut times = vec![0u64; total as usize];
        for &i in &got {
            times[i as usize] += 1;
        }
        prop_assert!(times.iter().all(|&t| t == part_epochs), "{:?}", times);
        // Until the first part is done, drop schedules as restart does.
        let mut counts = vec![0u64; lens.len()];
        let first_done = got.iter().position(|&i| {
            let (s, _) = m.locate(i).unwrap();
            counts[s] += 1;
            counts[s] == lens[s] * part_epochs
        });
        if let Some(p) = first_done {
            let restart = restart_prefix(lens, &weights, seed, p as u64 + 1);
            prop_assert_eq!(&got[..=p], &restart[..]);
        }
    }

    #[test]
    fn stop_ends_right_before_the_first_overdraw(
        weights in prop::collection::vec(0.001..10.0f64, 1..=5),
        lens in prop::collection::vec(0..300u64, 5),
        seed in any::<u64>(),
        part_epochs in 1..4u64,
    ) {
        let lens = &lens[..weights.len()];
        let m = mix(lens, &weights, Exhausted::Stop, seed, part_epochs);
        let got = stream(&m);
        prop_assert_eq!(m.epochs(), Some(1));
        if lens.iter().all(|&l| l == 0) {
            prop_assert!(got.is_empty());
            return Ok(());
        }
        // The model: run the restart stream, counting draws per part, until one would exceed
        // its budget.
        let total: u64 = lens.iter().sum();
        let restart = restart_prefix(lens, &weights, seed, total * part_epochs + 1);
        let mut counts = vec![0u64; lens.len()];
        let end = restart
            .iter()
            .position(|&i| {
                let (s, _) = m.locate(i).unwrap();
                counts[s] += 1;
                counts[s] > lens[s] * part_epochs
            })
            .unwrap();
        prop_assert_eq!(&got[..], &restart[..end]);
    }

    #[test]
    fn restart_draws_follow_each_parts_own_sampler(
        weights in prop::collection::vec(0.001..10.0f64, 1..=5),
        lens in prop::collection::vec(0..100u64, 5),
        seed in any::<u64>(),
        epochs in 1..4u64,
        epoch_len in prop::option::of(1..500u64),
        random in any::<bool>(),
    ) {
        let lens = &lens[..weights.len()];
        let mode = if random { SamplerMode::Random } else { SamplerMode::Shuffled };
        let cfg = MixConfig::new(weights.clone())
            .seed(seed)
            .mode(mode)
            .epochs(Some(epochs))
            .epoch_len(epoch_len);
        let m = Mix::new(lens, cfg).unwrap();
        let got = stream(&m);
        let total: u64 = lens.iter().sum();
        let expected_len = if total == 0 { 0 } else { epoch_len.unwrap_or(total) * epochs };
        prop_assert_eq!(got.len() as u64, expected_len);
        let mut draws: Vec<Vec<u64>> = vec![Vec::new(); lens.len()];
        for &i in &got {
            let (s, local) = m.locate(i).unwrap();
            let c = draws[s].len() as u64;
            let sampler = m.part_sampler(s).unwrap();
            prop_assert_eq!(local, sampler.index_at(c / lens[s], c % lens[s]).unwrap());
            draws[s].push(local);
        }
        if !random {
            for (s, d) in draws.iter().enumerate().filter(|(s, _)| lens[*s] > 0) {
                for epoch in d.chunks_exact(lens[s] as usize) {
                    let mut e = epoch.to_vec();
                    e.sort_unstable();
                    prop_assert_eq!(e, (0..lens[s]).collect::<Vec<_>>());
                }
            }
        }
    }
}

#[test]
fn part_epochs_continue_across_mix_epochs() {
    // Two mix epochs of 5 items over parts of 3 and 4: part epochs straddle mix epochs.
    let cfg = MixConfig::new(vec![1.0, 1.0])
        .epochs(Some(2))
        .epoch_len(Some(5));
    let m = Mix::new(&[3, 4], cfg).unwrap();
    let got = stream(&m);
    assert_eq!(got.len(), 10);
    let part0: Vec<u64> = got.iter().filter(|&&i| i < 3).copied().collect();
    assert_eq!(part0.len(), 5);
    let mut first = part0[..3].to_vec();
    first.sort_unstable();
    assert_eq!(first, vec![0, 1, 2]);
}

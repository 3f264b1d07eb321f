//! A crop of an encoded JPEG, which decodes only the crop's rows and the iMCU columns around it
//! (and, for a resize, the filter's reach), gives exactly the pixels of the same crop of the
//! whole decoded image: any size, chroma sampling, greyscale, progressive, any crop and output
//! size, as RGB, grey or RGBA.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use jpeg_encoder::SamplingFactor;
use proptest::prelude::*;

#[path = "support/images.rs"]
mod images;

use zrecord::transform::image::{self, CenterCrop, Decode, RandomCrop, RandomResizedCrop, Resize};
use zrecord::transform::{Op, Rng, Value};

/// `op` on the image still encoded (a region decode) and on its pixels decoded first.
fn both(bytes: &[u8], channels: u8, op: &Arc<dyn Op>, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let decode = Decode {
        channels: Some(channels),
    };
    let mut rng = Rng::new(0);
    let encoded = decode
        .apply(Value::Bytes(bytes.to_vec().into()), &mut rng)
        .unwrap();
    let Value::Image(mut whole) = encoded.clone() else {
        panic!("not an image")
    };
    assert!(!whole.is_decoded());
    whole.pixels().unwrap();
    assert!(whole.is_decoded());
    let out = |v: Value| {
        let v = op.apply(v, &mut Rng::new(seed)).unwrap();
        let Value::Image(img) = v else {
            panic!("not an image")
        };
        img.into_pixels().unwrap()
    };
    (out(encoded), out(Value::Image(whole)))
}

fn sampling() -> impl Strategy<Value = Option<SamplingFactor>> {
    prop_oneof![
        Just(None),
        Just(Some(SamplingFactor::F_1_1)),
        Just(Some(SamplingFactor::F_2_1)),
        Just(Some(SamplingFactor::F_2_2)),
        Just(Some(SamplingFactor::F_4_1)),
        Just(Some(SamplingFactor::F_1_2)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn a_region_decode_is_the_whole_decode_cropped(
        w in 1u16..140,
        h in 1u16..140,
        image_seed in 0u64..1_000,
        sampling in sampling(),
        progressive in any::<bool>(),
        channels in prop_oneof![Just(1u8), Just(3), Just(4)],
        kind in 0u8..4,
        size in 1u32..90,
        seed in any::<u64>(),
    ) {
        let bytes = images::jpeg_with(w, h, image_seed, sampling, progressive);
        let op: Arc<dyn Op> = match kind {
            0 => Arc::new(RandomResizedCrop::new(size, size.div_ceil(2))),
            1 => Arc::new(RandomCrop { width: size, height: size / 2 + 1 }),
            2 => Arc::new(CenterCrop { width: size, height: size }),
            _ => Arc::new(Resize::Exact { width: size, height: size / 3 + 1 }),
        };
        let (region, whole) = both(&bytes, channels, &op, seed);
        prop_assert_eq!(region.len(), whole.len());
        prop_assert!(region == whole, "{} differs from the whole decode", op.name());
    }
}

/// Large images with small crops: the case the region decode is for (most rows and columns
/// skipped), at the sizes of a photo dataset.
#[test]
fn small_crops_of_a_photo_sized_image() {
    for (i, sampling) in [
        SamplingFactor::F_2_2,
        SamplingFactor::F_2_1,
        SamplingFactor::F_1_1,
    ]
    .into_iter()
    .enumerate()
    {
        let bytes = images::jpeg_with(500, 375, i as u64, Some(sampling), i == 1);
        for seed in 0..40 {
            for op in [image::random_resized_crop(224), image::random_crop(224)] {
                let (region, whole) = both(&bytes, 3, &op, seed);
                assert!(region == whole, "{} (seed {seed}) differs", op.name());
            }
        }
    }
}

//! Each built-in image operation against a plain model: PNG decoding is exact (RGB, grey, RGBA
//! to RGB), JPEG decoding is close to the encoded pixels, flips mirror, the center crop cuts
//! (and pads) the middle, a resize to the same size and a full-image "random" crop are the
//! identity, normalize is `(x / 255 - mean) / std` in CHW or HWC; and any bytes at all (random,
//! truncated or bit-flipped images) give a value or an error, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use proptest::prelude::*;

#[path = "support/images.rs"]
mod images;

use zrecord::transform::image::{self, Layout, Normalize, RandomFlip, RandomResizedCrop};
use zrecord::transform::{Op, Rng, Value};
use zrecord::DType;

fn run(ops: &[Arc<dyn Op>], bytes: Vec<u8>) -> Result<Value, String> {
    let mut rng = Rng::new(1);
    let mut v = Value::Bytes(bytes.into());
    for op in ops {
        v = op.apply(v, &mut rng).map_err(|e| e.to_string())?;
    }
    Ok(v)
}

fn pixels_of(v: Value) -> (u32, u32, u8, Vec<u8>) {
    let Value::Image(img) = v else {
        panic!("not an image: {v:?}")
    };
    let (w, h, c) = (img.width(), img.height(), img.channels());
    (w, h, c, img.into_pixels().unwrap())
}

#[test]
fn png_decoding_is_exact() {
    let px = images::pixels(13, 7, 3);
    let (w, h, c, got) = pixels_of(run(&[image::decode()], images::png(&px, 13, 7, 3)).unwrap());
    assert_eq!((w, h, c), (13, 7, 3));
    assert_eq!(got, px);

    let grey: Vec<u8> = (0..35).map(|i| (i * 7) as u8).collect();
    let (.., c, got) = pixels_of(run(&[image::decode()], images::png(&grey, 5, 7, 1)).unwrap());
    assert_eq!(c, 3);
    assert_eq!(
        got,
        grey.iter().flat_map(|&g| [g, g, g]).collect::<Vec<_>>()
    );
    let own = Arc::new(image::Decode { channels: None });
    let (.., c, got) = pixels_of(run(&[own], images::png(&grey, 5, 7, 1)).unwrap());
    assert_eq!((c, got), (1, grey));

    let rgba: Vec<u8> = (0..4 * 6).map(|i| i as u8).collect();
    let (.., got) = pixels_of(run(&[image::decode()], images::png(&rgba, 3, 2, 4)).unwrap());
    assert_eq!(
        got,
        rgba.chunks(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect::<Vec<_>>()
    );
}

#[test]
fn jpeg_decoding_is_close() {
    let px = images::pixels(40, 30, 5);
    let (w, h, c, got) = pixels_of(run(&[image::decode()], images::jpeg(40, 30, 5)).unwrap());
    assert_eq!((w, h, c), (40, 30, 3));
    let err: u64 = px
        .iter()
        .zip(&got)
        .map(|(a, b)| u64::from(a.abs_diff(*b)))
        .sum();
    assert!(
        err / (px.len() as u64) < 12,
        "mean error {}",
        err / px.len() as u64
    );
}

#[test]
fn geometry_matches_the_models() {
    let (w, h) = (9usize, 6usize);
    let px = images::pixels(w as u16, h as u16, 7);
    let png = images::png(&px, w, h, 3);
    let at = |x: usize, y: usize| &px[(y * w + x) * 3..(y * w + x) * 3 + 3];

    let flip = Arc::new(RandomFlip {
        horizontal: true,
        p: 1.0,
    });
    let (.., got) = pixels_of(run(&[image::decode(), flip], png.clone()).unwrap());
    let model: Vec<u8> = (0..h)
        .flat_map(|y| (0..w).rev().flat_map(move |x| at(x, y).to_vec()))
        .collect();
    assert_eq!(got, model);

    let vflip = Arc::new(RandomFlip {
        horizontal: false,
        p: 1.0,
    });
    let (.., got) = pixels_of(run(&[image::decode(), vflip], png.clone()).unwrap());
    let model: Vec<u8> = (0..h)
        .rev()
        .flat_map(|y| (0..w).flat_map(move |x| at(x, y).to_vec()))
        .collect();
    assert_eq!(got, model);

    let never = Arc::new(RandomFlip {
        horizontal: true,
        p: 0.0,
    });
    let (.., got) = pixels_of(run(&[image::decode(), never], png.clone()).unwrap());
    assert_eq!(got, px);

    // 9x6 → 5x4 centred: left round(2.0) = 2, top round(1.0) = 1.
    let (cw, ch, _, got) = pixels_of(
        run(
            &[
                image::decode(),
                Arc::new(image::CenterCrop {
                    width: 5,
                    height: 4,
                }),
            ],
            png.clone(),
        )
        .unwrap(),
    );
    assert_eq!((cw, ch), (5, 4));
    let model: Vec<u8> = (1..5)
        .flat_map(|y| (2..7).flat_map(move |x| at(x, y).to_vec()))
        .collect();
    assert_eq!(got, model);

    let same = Arc::new(image::Resize::Exact {
        width: 9,
        height: 6,
    });
    let (.., got) = pixels_of(run(&[image::decode(), same], png.clone()).unwrap());
    assert_eq!(got, px);

    let whole = Arc::new(RandomResizedCrop {
        width: 9,
        height: 6,
        scale: (1.0, 1.0),
        ratio: (1.5, 1.5),
    });
    let (.., got) = pixels_of(run(&[image::decode(), whole], png.clone()).unwrap());
    assert_eq!(got, px);

    let (rw, rh, ..) = pixels_of(run(&[image::decode(), image::resize(3)], png.clone()).unwrap());
    assert_eq!((rw, rh), (4, 3));

    // A random crop is one of the image's windows; every window is reachable.
    let windows: Vec<Vec<u8>> = (0..=h - 4)
        .flat_map(|y| (0..=w - 5).map(move |x| (x, y)))
        .map(|(x, y)| {
            (y..y + 4)
                .flat_map(|yy| (x..x + 5).flat_map(move |xx| at(xx, yy).to_vec()))
                .collect()
        })
        .collect();
    let crop = Arc::new(image::RandomCrop {
        width: 5,
        height: 4,
    });
    let mut hit = vec![false; windows.len()];
    for seed in 0..400 {
        let mut rng = Rng::new(seed);
        let v = image::decode()
            .apply(Value::Bytes(png.clone().into()), &mut rng)
            .unwrap();
        let (.., got) = pixels_of(crop.apply(v, &mut rng).unwrap());
        let k = windows
            .iter()
            .position(|win| *win == got)
            .expect("a window of the image");
        hit[k] = true;
    }
    assert!(hit.iter().all(|&h| h), "every window of the 15 is drawn");
    // Larger than the image: centred and padded, as the center crop pads.
    let big = Arc::new(image::RandomCrop {
        width: 11,
        height: 6,
    });
    let (.., got) = pixels_of(run(&[image::decode(), big], png).unwrap());
    let model: Vec<u8> = (0..6)
        .flat_map(|y| {
            (0..11).flat_map(move |x| {
                if (1..10).contains(&x) {
                    at(x - 1, y).to_vec()
                } else {
                    vec![0; 3]
                }
            })
        })
        .collect();
    assert_eq!(got, model);
}

#[test]
fn normalize_matches_the_formula() {
    let px = images::pixels(4, 3, 2);
    let png = images::png(&px, 4, 3, 3);
    let (mean, std) = ([0.5f32, 0.25, 0.125], [0.5f32, 2.0, 0.25]);
    for layout in [Layout::Chw, Layout::Hwc] {
        let op = Arc::new(Normalize {
            mean: mean.to_vec(),
            std: std.to_vec(),
            dtype: DType::F32,
            layout,
        });
        let Value::Tensor(t) = run(&[image::decode(), op], png.clone()).unwrap() else {
            panic!()
        };
        assert_eq!(t.dtype(), DType::F32);
        let got: Vec<f32> = t
            .data()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        for y in 0..3 {
            for x in 0..4 {
                for c in 0..3 {
                    let want = (f32::from(px[(y * 4 + x) * 3 + c]) / 255.0 - mean[c]) / std[c];
                    let i = match layout {
                        Layout::Chw => c * 12 + y * 4 + x,
                        Layout::Hwc => (y * 4 + x) * 3 + c,
                    };
                    assert!(
                        (got[i] - want).abs() < 1e-5,
                        "{layout:?} {x},{y},{c}: {} vs {want}",
                        got[i]
                    );
                }
            }
        }
        let shape: &[u64] = if layout == Layout::Chw {
            &[3, 3, 4]
        } else {
            &[3, 4, 3]
        };
        assert_eq!(t.shape(), shape);
    }
    let half = Arc::new(Normalize {
        mean: mean.to_vec(),
        std: std.to_vec(),
        dtype: DType::Bf16,
        layout: Layout::Chw,
    });
    let Value::Tensor(t) = run(&[image::decode(), half], png.clone()).unwrap() else {
        panic!()
    };
    assert_eq!((t.dtype(), t.data().len()), (DType::Bf16, 3 * 12 * 2));
    let bad = Arc::new(Normalize {
        mean: vec![0.5],
        std: vec![0.5],
        dtype: DType::F32,
        layout: Layout::Chw,
    });
    assert!(run(&[image::decode(), bad], png)
        .unwrap_err()
        .contains("3 means"));
}

#[test]
fn wrong_order_is_a_clear_error() {
    let err = run(&[image::random_flip()], images::jpeg(8, 8, 1)).unwrap_err();
    assert!(err.contains("decode()"), "{err}");
    let err = run(&[image::decode()], b"GIF89a".to_vec()).unwrap_err();
    assert!(err.contains("not a JPEG or PNG"), "{err}");
}

fn chain() -> Vec<Arc<dyn Op>> {
    vec![
        image::decode(),
        image::random_resized_crop(8),
        image::random_flip(),
        image::normalize_imagenet(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_give_a_value_or_an_error(
        kind in 0..3u8,
        cut in 0usize..4000,
        flips in proptest::collection::vec((0usize..4000, any::<u8>()), 0..6),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = match kind {
            0 => images::jpeg(33, 21, 4),
            1 => images::png(&images::pixels(17, 9, 4), 17, 9, 3),
            _ => [&b"\xff\xd8\xff"[..], &noise].concat(),
        };
        for (at, x) in flips {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] ^= x;
            }
        }
        bytes.truncate(cut.max(1));
        // Ok or Err: both fine; a panic fails the test.
        let _ = run(&chain(), bytes);
    }
}

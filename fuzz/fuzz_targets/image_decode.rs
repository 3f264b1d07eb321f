//! Image bytes through the transform stage's built-in operations (feature `images`): any bytes
//! given to `decode()` then a crop, a flip and a normalize, or to `decode(channels=None)` then a
//! resize and a center crop, give a value or an error, never a panic, and a value has exactly
//! the output's size.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use zrecord::transform::image::{self, Decode};
use zrecord::transform::{Op, Rng, Value};

fn run(ops: &[Arc<dyn Op>], data: &[u8]) -> Option<Value> {
    let mut rng = Rng::new(data.len() as u64);
    let mut v = Value::Bytes(data.to_vec().into());
    for op in ops {
        v = op.apply(v, &mut rng).ok()?;
    }
    Some(v)
}

fuzz_target!(|data: &[u8]| {
    let train = [
        image::decode(),
        image::random_resized_crop(8),
        image::random_flip(),
        image::normalize_imagenet(),
    ];
    if let Some(Value::Tensor(t)) = run(&train, data) {
        assert_eq!(t.shape(), [3, 8, 8]);
        assert_eq!(t.data().len(), 3 * 8 * 8 * 4);
    }
    let own: Arc<dyn Op> = Arc::new(Decode { channels: None });
    let eval = [own, image::resize(6), image::center_crop(5)];
    if let Some(Value::Image(img)) = run(&eval, data) {
        let c = usize::from(img.channels());
        assert_eq!((img.width(), img.height()), (5, 5));
        assert_eq!(img.into_pixels().map(|p| p.len()).ok(), Some(25 * c));
    }
});

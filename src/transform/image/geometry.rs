//! Pixel geometry: channel conversion, the random resized crop's rectangle, crop and resize
//! (fast_image_resize), flips.

use fast_image_resize as fir;

use super::super::Rng;

/// A rectangle of an image, in pixels: `left`, `top`, `width`, `height`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rect {
    pub(crate) left: f64,
    pub(crate) top: f64,
    pub(crate) width: f64,
    pub(crate) height: f64,
}

/// Pixels of `have` channels as pixels of `want` channels (grey ↔ colour, alpha dropped or
/// made opaque).
pub(crate) fn convert_channels(raw: Vec<u8>, have: usize, want: usize) -> Vec<u8> {
    if have == want || have == 0 {
        return raw;
    }
    let n = raw.len() / have;
    let mut out = Vec::with_capacity(n * want);
    for px in raw.chunks_exact(have) {
        let (rgb, alpha) = match *px {
            [g] => ([g; 3], 255),
            [g, a] => ([g; 3], a),
            [r, g, b] => ([r, g, b], 255),
            [r, g, b, a, ..] => ([r, g, b], a),
            [] => ([0; 3], 255),
        };
        match want {
            1 => {
                let y = (u32::from(rgb[0]) * 299
                    + u32::from(rgb[1]) * 587
                    + u32::from(rgb[2]) * 114
                    + 500)
                    / 1000;
                out.push(y as u8);
            }
            3 => out.extend_from_slice(&rgb),
            _ => {
                out.extend_from_slice(&rgb);
                out.push(alpha);
            }
        }
    }
    out
}

/// torchvision's `RandomResizedCrop.get_params`: a rectangle of a random share `scale` of the
/// image's area and a random aspect ratio (log-uniform in `ratio`), placed uniformly; after 10
/// misses, the largest centred rectangle within `ratio`.
pub(crate) fn random_resized_rect(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut Rng,
) -> Rect {
    let (w, h) = (f64::from(width), f64::from(height));
    let area = w * h;
    let (lo, hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(lo, hi).exp();
        let cw = (target * aspect).sqrt().round();
        let ch = (target / aspect).sqrt().round();
        if cw > 0.0 && ch > 0.0 && cw <= w && ch <= h {
            let top = rng.below((h - ch) as u64 + 1) as f64;
            let left = rng.below((w - cw) as u64 + 1) as f64;
            return Rect {
                left,
                top,
                width: cw,
                height: ch,
            };
        }
    }
    let in_ratio = w / h;
    let (cw, ch) = if in_ratio < ratio.0 {
        (w, (w / ratio.0).round())
    } else if in_ratio > ratio.1 {
        ((h * ratio.1).round(), h)
    } else {
        (w, h)
    };
    Rect {
        left: ((w - cw) / 2.0).floor(),
        top: ((h - ch) / 2.0).floor(),
        width: cw,
        height: ch,
    }
}

fn pixel_type(channels: u8) -> fir::PixelType {
    match channels {
        1 => fir::PixelType::U8,
        2 => fir::PixelType::U8x2,
        4 => fir::PixelType::U8x4,
        _ => fir::PixelType::U8x3,
    }
}

thread_local! {
    /// One resizer per worker thread: it keeps its scratch buffers between records.
    static RESIZER: std::cell::RefCell<fir::Resizer> = std::cell::RefCell::new(fir::Resizer::new());
}

/// `rect` of a `width` × `height` × `channels` image, resized to `out_w` × `out_h` (bilinear
/// with antialiasing when shrinking, as torchvision's default).
pub(crate) fn crop_resize(
    pixels: &[u8],
    width: u32,
    height: u32,
    channels: u8,
    rect: Rect,
    out_w: u32,
    out_h: u32,
) -> Result<Vec<u8>, String> {
    let pt = pixel_type(channels);
    let src = fir::images::ImageRef::new(width, height, pixels, pt)
        .map_err(|e| format!("resize source: {e}"))?;
    let mut dst = fir::images::Image::new(out_w, out_h, pt);
    let options = fir::ResizeOptions::new()
        .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Bilinear))
        .crop(rect.left, rect.top, rect.width, rect.height);
    RESIZER
        .with(|r| r.borrow_mut().resize(&src, &mut dst, &options))
        .map_err(|e| format!("resize: {e}"))?;
    Ok(dst.into_vec())
}

/// Mirrors the image left to right, in place.
pub(crate) fn flip_horizontal(pixels: &mut [u8], width: u32, channels: u8) {
    let row = width as usize * usize::from(channels);
    if row == 0 {
        return;
    }
    for line in pixels.chunks_exact_mut(row) {
        match channels {
            1 => line.reverse(),
            2 => bytemuck::cast_slice_mut::<u8, [u8; 2]>(line).reverse(),
            3 => bytemuck::cast_slice_mut::<u8, [u8; 3]>(line).reverse(),
            _ => bytemuck::cast_slice_mut::<u8, [u8; 4]>(line).reverse(),
        }
    }
}

/// Mirrors the image top to bottom, in place.
pub(crate) fn flip_vertical(pixels: &mut [u8], width: u32, channels: u8) {
    let row = width as usize * usize::from(channels);
    if row == 0 {
        return;
    }
    let mut lines: Vec<&mut [u8]> = pixels.chunks_exact_mut(row).collect();
    let half = lines.len() / 2;
    let (top, bottom) = lines.split_at_mut(half);
    for (a, b) in top.iter_mut().zip(bottom.iter_mut().rev()) {
        a.swap_with_slice(b);
    }
}

/// The `out_w` × `out_h` window whose top left corner is at (`left`, `top`) of the image
/// (negative: the window starts before the image), zeros where it leaves the image.
#[allow(clippy::too_many_arguments)]
pub(crate) fn window(
    pixels: &[u8],
    width: u32,
    height: u32,
    channels: u8,
    left: i64,
    top: i64,
    out_w: u32,
    out_h: u32,
) -> Vec<u8> {
    let c = usize::from(channels);
    let mut out = vec![0u8; out_w as usize * out_h as usize * c];
    let x0 = (-left).max(0);
    let x1 = (i64::from(width) - left).min(i64::from(out_w));
    if x0 >= x1 {
        return out;
    }
    let n = (x1 - x0) as usize * c;
    for y in 0..i64::from(out_h) {
        let sy = y + top;
        if sy < 0 || sy >= i64::from(height) {
            continue;
        }
        let src = (sy as usize * width as usize + (x0 + left) as usize) * c;
        let dst = (y as usize * out_w as usize + x0 as usize) * c;
        if let (Some(d), Some(s)) = (out.get_mut(dst..dst + n), pixels.get(src..src + n)) {
            d.copy_from_slice(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_are_involutions() {
        let px: Vec<u8> = (0..5 * 3 * 3).map(|i| i as u8).collect();
        let mut h = px.clone();
        flip_horizontal(&mut h, 5, 3);
        assert_eq!(&h[..3], &px[12..15]);
        flip_horizontal(&mut h, 5, 3);
        assert_eq!(h, px);
        let mut v = px.clone();
        flip_vertical(&mut v, 5, 3);
        assert_eq!(&v[..15], &px[30..45]);
        flip_vertical(&mut v, 5, 3);
        assert_eq!(v, px);
    }

    #[test]
    fn window_pads_and_crops() {
        let px: Vec<u8> = (0..4 * 4).map(|i| i as u8).collect();
        assert_eq!(window(&px, 4, 4, 1, 1, 1, 2, 2), [5, 6, 9, 10]);
        let padded = window(&px, 4, 4, 1, -1, -1, 6, 6);
        assert_eq!(padded.len(), 36);
        assert_eq!(&padded[7..11], &px[0..4]);
        assert_eq!(padded[0], 0);
    }

    #[test]
    fn random_rect_inside_the_image() {
        let mut rng = Rng::new(9);
        for i in 0..2_000u32 {
            let (w, h) = (1 + i % 700, 1 + (i * 7) % 500);
            let r = random_resized_rect(w, h, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut rng);
            assert!(r.width >= 1.0 && r.height >= 1.0, "{r:?}");
            assert!(
                r.left + r.width <= f64::from(w) && r.top + r.height <= f64::from(h),
                "{w}x{h} {r:?}"
            );
        }
    }

    #[test]
    fn channel_conversion() {
        assert_eq!(
            convert_channels(vec![10, 20], 1, 3),
            [10, 10, 10, 20, 20, 20]
        );
        assert_eq!(convert_channels(vec![1, 2, 3, 4], 4, 3), [1, 2, 3]);
        assert_eq!(convert_channels(vec![255, 255, 255], 3, 1), [255]);
    }
}

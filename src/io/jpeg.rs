//! JPEG decoding through libjpeg-turbo's libjpeg API (built from source by `mozjpeg-sys`, whose
//! decoder is libjpeg-turbo's), including the two calls that let a crop decode only its part:
//! `jpeg_skip_scanlines` (rows above the crop are entropy-decoded but never dequantised,
//! inverse-transformed, upsampled or colour-converted) and `jpeg_crop_scanline` (columns outside
//! the crop, widened to the nearest iMCU boundary, are skipped the same way).
//!
//! Errors never `longjmp`: libjpeg's `error_exit` is a Rust function that unwinds (the C code is
//! built with `-fexceptions`, the `unwinding` feature of `mozjpeg-sys`) to a `catch_unwind` in
//! this module, where the message becomes an `Err`; the decompressor is destroyed on every path.
//! A warning about corrupt data (a truncated file, a bad Huffman code) is an error too: the
//! decoder would otherwise hand back grey blocks as if they were the image. Only warnings about
//! metadata (stray bytes between markers, common in real photographs, an unknown Adobe or JFIF
//! code, a bad ICC profile) are let through.

use std::ffi::{c_int, c_ulong};
use std::marker::PhantomData;
use std::mem;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use mozjpeg_sys as ffi;

// libjpeg's errors reach Rust by unwinding out of C; with `panic = "abort"` every corrupt image
// would end the process.
#[cfg(panic = "abort")]
compile_error!("feature `images` needs panic = \"unwind\": JPEG errors unwind out of libjpeg");

/// More scans than this is an error: a progressive JPEG may hold thousands of tiny scans that
/// each cost a pass over the image (libjpeg-turbo's own tools cap them at 500 the same way).
const MAX_SCANS: c_int = 500;

/// What a JPEG header says.
pub(crate) struct JpegHeader {
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// 1 for greyscale, 3 for colour (YCbCr, RGB, CMYK and YCCK all decode to colour).
    pub(crate) channels: u8,
}

/// The part of the image a decode produced: `width` × `height` pixels whose top left corner is
/// at (`left`, `top`) of the image. It contains the part asked for, and may be wider (a crop's
/// columns widen to iMCU boundaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) left: u32,
    pub(crate) top: u32,
    pub(crate) width: u32,
    pub(crate) height: u32,
}

/// An error's message, carried by the unwind from `error_exit` or `emit_message`.
struct JpegFailure(String);

/// A libjpeg decompressor reading `'a` bytes, destroyed on drop.
///
/// The decompressor and its error and progress managers are heap values owned through raw
/// pointers (`Box::into_raw`, freed in `Drop`): libjpeg keeps pointers to the managers, and the
/// progress hook reaches the decompressor through `client_data`, so nothing may move them or
/// reborrow them through a `Box` while libjpeg holds those pointers.
struct Decompress<'a> {
    cinfo: *mut ffi::jpeg_decompress_struct,
    err: *mut ffi::jpeg_error_mgr,
    progress: *mut ffi::jpeg_progress_mgr,
    _input: PhantomData<&'a [u8]>,
}

/// libjpeg's `JMSG_LENGTH_MAX`: `format_message` writes up to this many bytes, NUL included.
const MESSAGE_MAX: usize = 200;

/// The message libjpeg formats for its current error or warning code.
fn message(cinfo: &mut ffi::jpeg_common_struct) -> String {
    // SAFETY: `cinfo.err` is the error manager `Decompress::new` installed (alive as long as the
    // decompressor). `format_message` writes at most `JMSG_LENGTH_MAX` (200) bytes, NUL
    // included, into its buffer; the binding declares the buffer `&[u8; 80]` (a binding
    // mistake) although C writes to it, so it is called through a function type taking a raw
    // pointer to a 200-byte buffer (identical ABI: one pointer).
    unsafe {
        let Some(err) = cinfo.err.as_ref() else {
            return "libjpeg error (no error manager)".into();
        };
        let code = err.msg_code;
        match err.format_message {
            Some(format) => {
                type Writes = unsafe extern "C-unwind" fn(&mut ffi::jpeg_common_struct, *mut u8);
                let format: Writes = mem::transmute::<
                    unsafe extern "C-unwind" fn(&mut ffi::jpeg_common_struct, &[u8; 80]),
                    Writes,
                >(format);
                let mut buffer = [0u8; MESSAGE_MAX];
                format(cinfo, buffer.as_mut_ptr());
                let text = buffer.split(|&c| c == 0).next().unwrap_or_default();
                String::from_utf8_lossy(text).into_owned()
            }
            None => format!("libjpeg message {code}"),
        }
    }
}

/// libjpeg's fatal error: unwinds to `guarded` (never returns into libjpeg).
extern "C-unwind" fn error_exit(cinfo: &mut ffi::jpeg_common_struct) {
    let text = message(cinfo);
    // `resume_unwind`, not `panic!`: no panic hook runs, so nothing is printed.
    resume_unwind(Box::new(JpegFailure(text)));
}

/// The warnings that say nothing about the pixels: stray bytes between markers, an unknown
/// Adobe transform code or JFIF revision, a bad ICC profile (metadata zrecord does not use).
const BENIGN: [c_int; 4] = [
    ffi::JWRN_EXTRANEOUS_DATA,
    ffi::JWRN_ADOBE_XFORM,
    ffi::JWRN_JFIF_MAJOR,
    ffi::JWRN_BOGUS_ICC,
];

/// libjpeg's warnings (level −1) and trace messages (level ≥ 0): a warning about the image data
/// (a premature end, a bad Huffman or arithmetic code, a broken progression) is an error here,
/// the [`BENIGN`] ones and trace messages are ignored.
extern "C-unwind" fn emit_message(cinfo: &mut ffi::jpeg_common_struct, level: c_int) {
    if level >= 0 {
        return;
    }
    // SAFETY: as in `message`: `cinfo.err` is the boxed error manager, alive while decoding.
    let code = unsafe { cinfo.err.as_ref() }.map_or(-1, |e| e.msg_code);
    if BENIGN.contains(&code) {
        return;
    }
    let text = message(cinfo);
    resume_unwind(Box::new(JpegFailure(format!("corrupt JPEG data: {text}"))));
}

/// Called by libjpeg as it works: refuses a progressive image with more than [`MAX_SCANS`] scans.
extern "C-unwind" fn progress(cinfo: &mut ffi::jpeg_common_struct) {
    let d = cinfo.client_data.cast::<ffi::jpeg_decompress_struct>();
    if cinfo.is_decompressor == 0 || d.is_null() {
        return;
    }
    // SAFETY: `client_data` is the decompressor's own address, set by `Decompress::new` from
    // the pointer it owns (alive until `Drop`); one integer field is read.
    let scans = unsafe { std::ptr::addr_of!((*d).input_scan_number).read() };
    if scans > MAX_SCANS {
        resume_unwind(Box::new(JpegFailure(format!(
            "corrupt JPEG data: more than {MAX_SCANS} scans"
        ))));
    }
}

/// Runs `f` (a sequence of libjpeg calls), turning libjpeg's errors into `Err`.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| match payload.downcast::<JpegFailure>() {
        Ok(failure) => failure.0,
        Err(_) => "the JPEG decoder failed on these bytes (it panicked)".into(),
    })
}

/// Memory libjpeg may allocate for one image (its whole-image coefficient buffer of a
/// progressive file is the large part: 2 bytes a coefficient): past it the decode fails
/// ("backing store not supported") instead of allocating.
const MAX_MEMORY: std::ffi::c_long = 1 << 30;

impl<'a> Decompress<'a> {
    /// A decompressor reading `bytes`, its header read.
    fn new(bytes: &'a [u8]) -> Result<Decompress<'a>, String> {
        // SAFETY: an all-zero `jpeg_error_mgr`, `jpeg_progress_mgr` and
        // `jpeg_decompress_struct` are what libjpeg's examples start from (every field is an
        // integer, a pointer or an `Option` of a function; `jpeg_CreateDecompress` zeroes the
        // decompressor itself but for `err` and `client_data`).
        let (err, progress, cinfo) = unsafe {
            (
                Box::into_raw(Box::new(mem::zeroed::<ffi::jpeg_error_mgr>())),
                Box::into_raw(Box::new(mem::zeroed::<ffi::jpeg_progress_mgr>())),
                Box::into_raw(Box::new(mem::zeroed::<ffi::jpeg_decompress_struct>())),
            )
        };
        // Owned from here: `Drop` frees all three (and destroying a never-created, zeroed
        // decompressor does nothing: its memory manager is null).
        let mut d = Decompress {
            cinfo,
            err,
            progress,
            _input: PhantomData,
        };
        // SAFETY: the three pointers are live, distinct allocations owned by `d`.
        unsafe {
            ffi::jpeg_std_error(&mut *err);
            (*err).error_exit = Some(error_exit);
            (*err).emit_message = Some(emit_message);
            (*progress).progress_monitor = Some(progress_hook());
            (*cinfo).common.err = err;
        }
        guarded(|| {
            // SAFETY: `cinfo` is zeroed with a valid error manager, as libjpeg requires.
            unsafe { ffi::jpeg_create_decompress(cinfo) }
        })?;
        let len = c_ulong::try_from(bytes.len()).map_err(|_| "JPEG too large".to_string())?;
        let c = d.cinfo();
        c.common.progress = progress;
        c.common.client_data = cinfo.cast();
        // SAFETY: `jpeg_create_decompress` set up the memory manager.
        if let Some(m) = unsafe { c.common.mem.as_mut() } {
            m.max_memory_to_use = MAX_MEMORY;
        }
        guarded(|| {
            // SAFETY: `bytes` outlives the decompressor (`'a`); libjpeg only reads it.
            unsafe {
                ffi::jpeg_mem_src(c, bytes.as_ptr(), len);
                ffi::jpeg_read_header(c, 1);
            }
        })?;
        Ok(d)
    }

    /// The decompressor.
    fn cinfo(&mut self) -> &mut ffi::jpeg_decompress_struct {
        // SAFETY: `self.cinfo` is a live allocation owned by `self` until `Drop`; the returned
        // borrow is tied to `&mut self`.
        unsafe { &mut *self.cinfo }
    }

    fn header(&mut self) -> JpegHeader {
        let c = self.cinfo();
        JpegHeader {
            width: c.image_width,
            height: c.image_height,
            channels: if c.num_components == 1 { 1 } else { 3 },
        }
    }
}

/// The progress hook, as the binding's function type.
fn progress_hook() -> unsafe extern "C-unwind" fn(&mut ffi::jpeg_common_struct) {
    progress
}

impl Drop for Decompress<'_> {
    fn drop(&mut self) {
        let cinfo = self.cinfo;
        // SAFETY: `cinfo` is live; destroying is valid in any state: after an error, and on a
        // decompressor whose create failed or never ran (a null memory manager: nothing to do).
        let _ = guarded(|| unsafe { ffi::jpeg_destroy_decompress(&mut *cinfo) });
        // SAFETY: the three came from `Box::into_raw` in `new`, and libjpeg, destroyed, no
        // longer holds them.
        unsafe {
            drop(Box::from_raw(self.cinfo));
            drop(Box::from_raw(self.err));
            drop(Box::from_raw(self.progress));
        }
    }
}

/// Reads the header of the JPEG in `bytes`.
pub(crate) fn header(bytes: &[u8]) -> Result<JpegHeader, String> {
    Decompress::new(bytes).map(|mut d| d.header())
}

/// Decodes the JPEG in `bytes` to `channels` (1: grey, 3: RGB, 4: RGBA with opaque alpha)
/// per pixel: the whole image, or, with `crop` = (left, top, right, bottom), a region that
/// contains those pixels (the rows exactly, the columns widened to iMCU boundaries). The
/// image's sides must be at most `max_side`. The pixels are those a whole-image decode gives at
/// the same places. A crop reads the file only down to its last row, so damage below it (a
/// file cut short) fails the whole decode but not that crop.
pub(crate) fn decode(
    bytes: &[u8],
    channels: u8,
    crop: Option<(u32, u32, u32, u32)>,
    max_side: u32,
) -> Result<(Vec<u8>, Region), String> {
    let mut d = Decompress::new(bytes)?;
    let cinfo = d.cinfo();
    let (w, h) = (cinfo.image_width, cinfo.image_height);
    if w == 0 || h == 0 || w > max_side || h > max_side {
        return Err(format!(
            "image of {w}x{h} pixels (sides must be 1 to {max_side})"
        ));
    }
    let cmyk = matches!(
        cinfo.jpeg_color_space,
        ffi::J_COLOR_SPACE::JCS_CMYK | ffi::J_COLOR_SPACE::JCS_YCCK
    );
    let (space, produced) = match (cmyk, channels) {
        (true, _) => (ffi::J_COLOR_SPACE::JCS_CMYK, 4usize),
        (false, 1) => (ffi::J_COLOR_SPACE::JCS_GRAYSCALE, 1),
        (false, 4) => (ffi::J_COLOR_SPACE::JCS_EXT_RGBA, 4),
        (false, _) => (ffi::J_COLOR_SPACE::JCS_RGB, 3),
    };
    let (left, top, right, bottom) = crop.unwrap_or((0, 0, w, h));
    if left >= right || top >= bottom || right > w || bottom > h {
        return Err(format!(
            "crop ({left}, {top})-({right}, {bottom}) is not inside the {w}x{h} image"
        ));
    }
    cinfo.out_color_space = space;
    // Block smoothing (progressive files whose scans stop before the last refinement) treats a
    // crop's first block column as the image's edge: off, so a crop's pixels are the whole
    // decode's.
    cinfo.do_block_smoothing = 0;
    // libjpeg upsamples chroma at a crop's left and right edges as at the image's (the sample
    // past the edge is repeated), so the edge pixels of a cropped decode can differ from the
    // whole decode's: widening by `EDGE` columns keeps those out of the pixels asked for.
    const EDGE: u32 = 2;
    let (left_w, right_w) = (left.saturating_sub(EDGE), right.saturating_add(EDGE).min(w));
    let (mut x, mut width) = (left_w, right_w - left_w);
    guarded(|| {
        // SAFETY: the header has been read and the output colour space is one libjpeg converts
        // this image to; cropping and skipping follow `jpeg_start_decompress`, before any row is
        // read, as libjpeg requires.
        unsafe {
            ffi::jpeg_start_decompress(cinfo);
            if width < cinfo.output_width {
                ffi::jpeg_crop_scanline(cinfo, &mut x, &mut width);
            }
            if top > 0 {
                ffi::jpeg_skip_scanlines(cinfo, top);
            }
        }
    })?;
    let rows = (bottom - top) as usize;
    if cinfo.output_width != width
        || usize::try_from(cinfo.output_components).ok() != Some(produced)
        || cinfo.output_scanline != top
    {
        return Err("the JPEG decoder did not set up the crop it was asked for".into());
    }
    let stride = width as usize * produced;
    let mut pixels = vec![0u8; stride * rows];
    let mut lines: Vec<*mut u8> = pixels
        .chunks_exact_mut(stride)
        .map(|r| r.as_mut_ptr())
        .collect();
    let mut done = 0usize;
    while done < rows {
        let rest = lines.get_mut(done..).unwrap_or_default();
        let want = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        let ptr = rest.as_mut_ptr();
        // SAFETY: `ptr` points at `want` row pointers, each to `stride` writable bytes of
        // `pixels` (alive and not otherwise borrowed until the loop ends); libjpeg writes at
        // most `want` rows of `output_width × output_components` = `stride` bytes.
        let n = guarded(|| unsafe { ffi::jpeg_read_scanlines(cinfo, ptr, want) })?;
        if n == 0 {
            return Err("the JPEG decoder returned no rows".into());
        }
        done += n as usize;
    }
    drop(lines);
    let region = Region {
        left: x,
        top,
        width,
        height: bottom - top,
    };
    if cmyk {
        let rgb = cmyk_to(&pixels, adobe_marker(bytes), channels);
        return Ok((rgb, region));
    }
    Ok((pixels, region))
}

/// CMYK (Adobe's inverted form when `inverted`, as Photoshop writes it) to `channels` per pixel.
fn cmyk_to(cmyk: &[u8], inverted: bool, channels: u8) -> Vec<u8> {
    let c = usize::from(channels);
    let mut out = Vec::with_capacity(cmyk.len() / 4 * c);
    for px in cmyk.chunks_exact(4) {
        let px = <[u8; 4]>::try_from(px).unwrap_or_default();
        let [cc, m, y, k] = px.map(|v| if inverted { v } else { 255 - v });
        let mul = |a: u8| ((u16::from(a) * u16::from(k) + 127) / 255) as u8;
        let (r, g, b) = (mul(cc), mul(m), mul(y));
        match channels {
            1 => out.push(
                ((u32::from(r) * 299 + u32::from(g) * 587 + u32::from(b) * 114 + 500) / 1000) as u8,
            ),
            4 => out.extend_from_slice(&[r, g, b, 255]),
            _ => out.extend_from_slice(&[r, g, b]),
        }
    }
    out
}

/// True if the JPEG has an Adobe APP14 segment before its first scan: Adobe's CMYK is stored
/// inverted (libjpeg reads the same marker for the same purpose; its flag is not exported).
fn adobe_marker(bytes: &[u8]) -> bool {
    let mut at = 2; // past SOI
    while let (Some(&first), Some(&marker)) = (bytes.get(at), bytes.get(at + 1)) {
        if first != 0xff || marker == 0xff {
            // Stray bytes between segments (libjpeg skips them too), or a fill byte.
            at += 1;
            continue;
        }
        if marker == 0xda || marker == 0xd9 {
            return false; // start of scan, end of image
        }
        let (Some(&hi), Some(&lo)) = (bytes.get(at + 2), bytes.get(at + 3)) else {
            return false;
        };
        // Segment lengths are big-endian.
        let len = usize::from(hi) << 8 | usize::from(lo);
        if marker == 0xee && bytes.get(at + 4..at + 9) == Some(b"Adobe".as_slice()) {
            return true;
        }
        at += 2 + len;
    }
    false
}

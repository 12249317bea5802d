//! Output tensors as the heads read them: what a backend knows of an output before running
//! ([`OutputInfo`]: name, shape, [`Dtype`]), one frame's output ([`TensorRef`]: a borrowed
//! slice in the output's own type, never converted as a whole), and the element trait the
//! decoders are generic over ([`Elem`]), whose keys compare like the real values so that
//! thresholds apply to raw int8 or float16 elements.
//!
//! Quantised outputs follow `rknn_api.h` (`rknn_tensor_attr`): affine asymmetric, real value
//! `(q - zp) * scale`, per tensor. A DFP output (`q / 2^fl`) is the affine case with zero
//! point 0 and scale `2^-fl`.

use anyhow::{bail, ensure, Result};
use half::f16;

/// Per-tensor affine quantisation: real value `(q - zp) * scale`, `scale > 0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quant {
    /// Zero point: the integer that stands for 0.0.
    pub zp: i32,
    /// Real value of one integer step (finite, > 0).
    pub scale: f32,
}

impl Quant {
    /// `q` is the value itself (zero point 0, scale 1).
    pub(crate) const IDENTITY: Quant = Quant { zp: 0, scale: 1.0 };

    /// Checks `scale` is a finite positive number: the one-line error names the value.
    pub fn check(self) -> Result<Quant> {
        ensure!(
            self.scale.is_finite() && self.scale > 0.0,
            "quantisation scale {} is not a positive number",
            self.scale
        );
        Ok(self)
    }
}

/// Element type of one output tensor and how its elements map to real numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dtype {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16 (the RKNN runtime's usual float output).
    F16,
    /// Signed 8-bit, affine per tensor.
    I8(Quant),
    /// Unsigned 8-bit, affine per tensor.
    U8(Quant),
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
            Dtype::I8(_) | Dtype::U8(_) => 1,
        }
    }
}

impl std::fmt::Display for Dtype {
    /// `float32`, `float16`, `int8 (zp -31, scale 0.0229)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dtype::F32 => f.write_str("float32"),
            Dtype::F16 => f.write_str("float16"),
            Dtype::I8(q) => write!(f, "int8 (zp {}, scale {})", q.zp, q.scale),
            Dtype::U8(q) => write!(f, "uint8 (zp {}, scale {})", q.zp, q.scale),
        }
    }
}

/// One model output as a backend describes it before the first frame.
///
/// `shape` is in the model's logical order: `[1, N, K]` for a flat head, `[1, C, H, W]` for
/// a per-stride map. A 4-D output whose memory is `[1, H, W, C]` (an RKNN output with
/// `fmt = NHWC`) keeps the logical `[1, C, H, W]` here and sets `channels_last`.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputInfo {
    /// Tensor name, for messages.
    pub name: String,
    /// Dimensions, logical order (see above).
    pub shape: Vec<usize>,
    /// Element type and quantisation.
    pub dtype: Dtype,
    /// A 4-D output laid out `[1, H, W, C]` in memory.
    pub channels_last: bool,
}

impl OutputInfo {
    /// A channels-first output (ONNX, or an RKNN output in NCHW).
    pub fn new(name: impl Into<String>, shape: &[usize], dtype: Dtype) -> OutputInfo {
        OutputInfo { name: name.into(), shape: shape.to_vec(), dtype, channels_last: false }
    }

    /// Number of elements (the product of `shape`).
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `[1,3549,85] float32`, `[1,64,80,80] int8 (zp -56, scale 0.11) NHWC`.
    pub(crate) fn shape_text(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        let nhwc = if self.channels_last { " NHWC" } else { "" };
        format!("[{}] {}{nhwc}", dims.join(","), self.dtype)
    }
}

/// One output of one frame, borrowed in its own element type (never widened as a whole).
#[derive(Clone, Copy, Debug)]
pub enum TensorRef<'a> {
    /// float32 elements.
    F32(&'a [f32]),
    /// float16 elements.
    F16(&'a [f16]),
    /// int8 elements and their quantisation.
    I8(&'a [i8], Quant),
    /// uint8 elements and their quantisation.
    U8(&'a [u8], Quant),
}

impl<'a> TensorRef<'a> {
    /// Views little-endian bytes (e.g. what `rknn_outputs_get` wrote) as elements of
    /// `dtype`. Errors when the length is not a whole number of elements or the bytes are
    /// not aligned for the type (a float32 view needs 4-byte alignment).
    pub fn from_bytes(bytes: &'a [u8], dtype: Dtype) -> Result<TensorRef<'a>> {
        let cast_err =
            |e: bytemuck::PodCastError| anyhow::anyhow!("cannot view {} bytes as {dtype}: {e:?}", bytes.len());
        Ok(match dtype {
            Dtype::F32 => TensorRef::F32(bytemuck::try_cast_slice(bytes).map_err(cast_err)?),
            Dtype::F16 => TensorRef::F16(bytemuck::try_cast_slice(bytes).map_err(cast_err)?),
            Dtype::I8(q) => TensorRef::I8(bytemuck::cast_slice(bytes), q),
            Dtype::U8(q) => TensorRef::U8(bytes, q),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorRef::F32(d) => d.len(),
            TensorRef::F16(d) => d.len(),
            TensorRef::I8(d, _) => d.len(),
            TensorRef::U8(d, _) => d.len(),
        }
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type, with its quantisation.
    pub fn dtype(&self) -> Dtype {
        match self {
            TensorRef::F32(_) => Dtype::F32,
            TensorRef::F16(_) => Dtype::F16,
            TensorRef::I8(_, q) => Dtype::I8(*q),
            TensorRef::U8(_, q) => Dtype::U8(*q),
        }
    }

    /// Real value of element `i` (dequantised, widened), `None` past the end.
    pub fn value(&self, i: usize) -> Option<f32> {
        Some(match self {
            TensorRef::F32(d) => d.get(i)?.value(Quant::IDENTITY),
            TensorRef::F16(d) => d.get(i)?.value(Quant::IDENTITY),
            TensorRef::I8(d, q) => d.get(i)?.value(*q),
            TensorRef::U8(d, q) => d.get(i)?.value(*q),
        })
    }

    /// Every element as its real value (tests and tools; the decoders never do this).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        (0..self.len()).filter_map(|i| self.value(i)).collect()
    }

    /// Checks this frame's tensor against what the backend announced: same element type
    /// and quantisation, `info.len()` elements.
    pub fn check(&self, info: &OutputInfo) -> Result<()> {
        if self.dtype() != info.dtype || self.len() != info.len() {
            bail!(
                "output {} holds {} {} elements, but the model announced {}",
                info.name,
                self.len(),
                self.dtype(),
                info.shape_text()
            );
        }
        Ok(())
    }
}

/// An output element type the decoders are generic over.
///
/// A [`Elem::Key`] orders like the real value, so a decoder compares raw elements against a
/// threshold converted once per tensor ([`Elem::key_above`]) instead of dequantising every
/// element: for int8 the key is the integer itself, as the model zoo's C post-processing
/// does it; for float16 it is the widened value.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    /// What raw elements are compared as.
    type Key: Copy + PartialOrd;
    /// The comparable key of this element.
    fn key(self) -> Self::Key;
    /// The real value of this element under `q` (ignored by float types).
    fn value(self, q: Quant) -> f32;
    /// The key `k` such that `value > t` exactly when `key > k` (for integers
    /// `floor(t / scale + zp)`, saturated to the type's range).
    fn key_above(t: f32, q: Quant) -> Self::Key;
    /// The key `k` such that `value < t` exactly when `key < k` (for integers
    /// `ceil(t / scale + zp)`).
    fn key_below(t: f32, q: Quant) -> Self::Key;
    /// Whether a key stands for a finite value (integers always do).
    fn finite(k: Self::Key) -> bool;
}

impl Elem for f32 {
    type Key = f32;
    #[inline]
    fn key(self) -> f32 {
        self
    }
    #[inline]
    fn value(self, _: Quant) -> f32 {
        self
    }
    fn key_above(t: f32, _: Quant) -> f32 {
        t
    }
    fn key_below(t: f32, _: Quant) -> f32 {
        t
    }
    #[inline]
    fn finite(k: f32) -> bool {
        k.is_finite()
    }
}

impl Elem for f16 {
    type Key = f32;
    #[inline]
    fn key(self) -> f32 {
        self.to_f32()
    }
    #[inline]
    fn value(self, _: Quant) -> f32 {
        self.to_f32()
    }
    fn key_above(t: f32, _: Quant) -> f32 {
        t
    }
    fn key_below(t: f32, _: Quant) -> f32 {
        t
    }
    #[inline]
    fn finite(k: f32) -> bool {
        k.is_finite()
    }
}

/// `t / scale + zp` in f64, for the integer keys.
fn quantised(t: f32, q: Quant) -> f64 {
    t as f64 / q.scale as f64 + q.zp as f64
}

/// Clamps a real key into `lo - 1 ..= hi + 1`, which keeps every comparison with the
/// type's values as it was.
fn clamp_key(x: f64, lo: i32, hi: i32) -> i32 {
    x.clamp(lo as f64 - 1.0, hi as f64 + 1.0) as i32
}

impl Elem for i8 {
    type Key = i32;
    #[inline]
    fn key(self) -> i32 {
        self as i32
    }
    #[inline]
    fn value(self, q: Quant) -> f32 {
        (self as i32 - q.zp) as f32 * q.scale
    }
    fn key_above(t: f32, q: Quant) -> i32 {
        clamp_key(quantised(t, q).floor(), -128, 127)
    }
    fn key_below(t: f32, q: Quant) -> i32 {
        clamp_key(quantised(t, q).ceil(), -128, 127)
    }
    #[inline]
    fn finite(_: i32) -> bool {
        true
    }
}

impl Elem for u8 {
    type Key = i32;
    #[inline]
    fn key(self) -> i32 {
        self as i32
    }
    #[inline]
    fn value(self, q: Quant) -> f32 {
        (self as i32 - q.zp) as f32 * q.scale
    }
    fn key_above(t: f32, q: Quant) -> i32 {
        clamp_key(quantised(t, q).floor(), 0, 255)
    }
    fn key_below(t: f32, q: Quant) -> i32 {
        clamp_key(quantised(t, q).ceil(), 0, 255)
    }
    #[inline]
    fn finite(_: i32) -> bool {
        true
    }
}

/// Runs `$body` with `$d` bound to the tensor's element slice (`&[E]` for its own `E:
/// Elem`) and `$q` to its [`Quant`] ([`Quant::IDENTITY`] for floats): one copy of the body
/// per element type.
macro_rules! with_elems {
    ($t:expr, |$d:ident, $q:ident| $body:expr) => {
        match $t {
            $crate::heads::tensor::TensorRef::F32($d) => {
                let $q = $crate::heads::tensor::Quant::IDENTITY;
                $body
            }
            $crate::heads::tensor::TensorRef::F16($d) => {
                let $q = $crate::heads::tensor::Quant::IDENTITY;
                $body
            }
            $crate::heads::tensor::TensorRef::I8($d, q) => {
                let $q = *q;
                $body
            }
            $crate::heads::tensor::TensorRef::U8($d, q) => {
                let $q = *q;
                $body
            }
        }
    };
}
pub(crate) use with_elems;

/// Where attribute `a` of anchor `k` sits in a tensor: `base + k * anchor + a * attr`.
/// A flat `[1, N, K]` output has `anchor = K, attr = 1`; a `[1, C, H, W]` map has
/// `anchor = 1, attr = H * W` (channels last: `anchor = C, attr = 1`); the transposed
/// Ultralytics `[1, 4 + C, N]` has `anchor = 1, attr = N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plane {
    /// Index of attribute 0 of anchor 0.
    pub base: usize,
    /// Elements from one anchor to the next.
    pub anchor: usize,
    /// Elements from one attribute to the next.
    pub attr: usize,
}

impl Plane {
    /// The index of attribute `a` of anchor `k`.
    #[inline]
    pub fn at(&self, k: usize, a: usize) -> usize {
        self.base + k * self.anchor + a * self.attr
    }

    /// The plane of a `[1, C, H, W]` output (memory `[1, H, W, C]` when `channels_last`),
    /// starting at channel `first`.
    pub(crate) fn of_map(info: &OutputInfo, first: usize) -> Plane {
        let (c, hw) = (info.shape[1], info.shape[2] * info.shape[3]);
        if info.channels_last {
            Plane { base: first, anchor: c, attr: 1 }
        } else {
            Plane { base: first * hw, anchor: 1, attr: hw }
        }
    }
}

/// Whether a raw key passes a threshold key: `key > floor`, false when either is NaN.
#[inline]
pub(crate) fn passes<K: PartialOrd>(key: K, floor: K) -> bool {
    key > floor
}

/// Whether a raw key is under a threshold key: `key < below`, false when either is NaN.
#[inline]
pub(crate) fn under<K: PartialOrd>(key: K, below: K) -> bool {
    key < below
}

/// One tensor's elements with their quantisation and the plane of one level: what a
/// decoder reads an anchor's attributes through.
#[derive(Clone, Copy)]
pub(crate) struct View<'a, E: Elem> {
    /// The elements.
    pub(crate) d: &'a [E],
    /// Their quantisation.
    pub(crate) q: Quant,
    /// Where the level's anchors are.
    pub(crate) p: Plane,
}

impl<'a, E: Elem> View<'a, E> {
    /// The element of attribute `a` of anchor `k`.
    #[inline]
    pub(crate) fn at(&self, k: usize, a: usize) -> E {
        self.d[self.p.at(k, a)]
    }

    /// The real value of attribute `a` of anchor `k`.
    #[inline]
    pub(crate) fn value(&self, k: usize, a: usize) -> f32 {
        self.at(k, a).value(self.q)
    }
}

/// The best of `classes` class scores of anchor `k` (attributes `first ..`) whose key is
/// above `floor`: `Some((class, key))`, or `None` when no class beats it. `bad` is set when
/// a score read is not finite (the caller skips and counts the anchor).
#[inline]
pub(crate) fn best_class<E: Elem>(
    v: &View<'_, E>,
    k: usize,
    first: usize,
    classes: usize,
    floor: E::Key,
    bad: &mut bool,
) -> Option<(usize, E::Key)> {
    let mut best: Option<(usize, E::Key)> = None;
    let mut top = floor;
    let mut i = v.p.at(k, first);
    for c in 0..classes {
        let key = v.d[i].key();
        if !E::finite(key) {
            *bad = true;
        } else if key > top {
            top = key;
            best = Some((c, key));
        }
        i += v.p.attr;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_keys_threshold_exactly_like_values() {
        // For every int8 element and a spread of thresholds, key > key_above(t) iff value > t,
        // and key < key_below(t) iff value < t.
        for q in [Quant { zp: -31, scale: 0.0229 }, Quant { zp: 0, scale: 0.25 }, Quant { zp: 100, scale: 1.0 / 255.0 }]
        {
            for t in [0.0f32, 0.1, 0.25, 0.3, 0.5, 0.9, 3.0, -1.0, 50.0] {
                let (above, below) = (i8::key_above(t, q), i8::key_below(t, q));
                for x in i8::MIN..=i8::MAX {
                    let v = x.value(q);
                    assert_eq!(x.key() > above, v > t, "{x} {q:?} t {t}: value {v}");
                    assert_eq!(x.key() < below, v < t, "{x} {q:?} t {t}: value {v}");
                }
                let (above, below) = (u8::key_above(t, q), u8::key_below(t, q));
                for x in u8::MIN..=u8::MAX {
                    let v = x.value(q);
                    assert_eq!(x.key() > above, v > t, "{x} {q:?} t {t}: value {v}");
                    assert_eq!(x.key() < below, v < t, "{x} {q:?} t {t}: value {v}");
                }
            }
        }
    }

    #[test]
    fn bytes_view_in_each_type() {
        let f: Vec<f32> = vec![0.5, -1.25, 3.0];
        let t = TensorRef::from_bytes(bytemuck::cast_slice(&f), Dtype::F32).unwrap();
        assert_eq!(t.to_f32_vec(), f);
        // 0x3800 = 0.5, 0xBD00 = -1.25, 0x4200 = 3.0 (binary16).
        let h: Vec<u16> = vec![0x3800, 0xBD00, 0x4200];
        let t = TensorRef::from_bytes(bytemuck::cast_slice(&h), Dtype::F16).unwrap();
        assert_eq!(t.to_f32_vec(), f);
        let q = Quant { zp: -31, scale: 0.5 };
        let t = TensorRef::from_bytes(&[(-31i8) as u8, (-30i8) as u8, 0x80, 0x7F], Dtype::I8(q)).unwrap();
        assert_eq!(t.to_f32_vec(), vec![0.0, 0.5, -48.5, 79.0]);
        let t = TensorRef::from_bytes(&[128, 130, 0], Dtype::U8(Quant { zp: 128, scale: 0.5 })).unwrap();
        assert_eq!(t.to_f32_vec(), vec![0.0, 1.0, -64.0]);
        // Not a whole number of float32 elements.
        let err = TensorRef::from_bytes(&[0u8; 7], Dtype::F32).unwrap_err().to_string();
        assert!(err.contains("7 bytes") && err.contains("float32"), "{err}");
        assert!(Quant { zp: 0, scale: 0.0 }.check().is_err());
        assert!(Quant { zp: 0, scale: f32::NAN }.check().is_err());
    }

    #[test]
    fn best_class_skips_non_finite_and_respects_the_floor() {
        // Two anchors, three classes, laid out [1, 3, 2] (attr stride 2).
        let d = [0.2f32, 0.9, 0.7, f32::NAN, 0.4, 0.1];
        let v = View { d: &d, q: Quant::IDENTITY, p: Plane { base: 0, anchor: 1, attr: 2 } };
        let mut bad = false;
        assert_eq!(best_class(&v, 0, 0, 3, 0.3, &mut bad), Some((1, 0.7)));
        assert!(!bad);
        assert_eq!(best_class(&v, 1, 0, 3, 0.3, &mut bad), Some((0, 0.9)));
        assert!(bad);
        let mut bad = false;
        assert_eq!(best_class(&v, 0, 0, 3, 0.8, &mut bad), None);
        assert!(passes(0.5, 0.3) && !passes(f32::NAN, 0.3) && !passes(0.3, 0.3));
        assert!(under(0.2, 0.3) && !under(f32::NAN, 0.3) && !under(0.3, 0.3));
    }
}

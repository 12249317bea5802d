//! numpy `.npy` files (format versions 1.0, 2.0 and 3.0, C order) of float32, float16,
//! int8 or uint8: the raw model outputs the tests compare decoders on
//! (`tests/data/golden/*_sim_output.npy`, and the outputs `scripts/models/` writes).

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use half::f16;

use super::tensor::{Quant, TensorRef};

/// The elements of an `.npy` file, in its own type.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyData {
    /// `<f4`.
    F32(Vec<f32>),
    /// `<f2`.
    F16(Vec<f16>),
    /// `|i1`.
    I8(Vec<i8>),
    /// `|u1`.
    U8(Vec<u8>),
}

impl NpyData {
    /// A view for a decoder; `q` is the quantisation of integer data (ignored for floats).
    pub fn tensor(&self, q: Quant) -> TensorRef<'_> {
        match self {
            NpyData::F32(v) => TensorRef::F32(v),
            NpyData::F16(v) => TensorRef::F16(v),
            NpyData::I8(v) => TensorRef::I8(v, q),
            NpyData::U8(v) => TensorRef::U8(v, q),
        }
    }
}

/// Reads an `.npy` file: `(shape, elements)`. Errors name the path.
pub fn read_npy(path: &Path) -> Result<(Vec<usize>, NpyData)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_npy(&bytes).with_context(|| format!("{} is not a float32, float16, int8 or uint8 .npy file", path.display()))
}

/// Reads a float32 `.npy` file: `(shape, values)`.
#[cfg(test)]
pub(crate) fn read_npy_f32(path: &Path) -> Result<(Vec<usize>, Vec<f32>)> {
    match read_npy(path)? {
        (shape, NpyData::F32(v)) => Ok((shape, v)),
        _ => bail!("{} is not a float32 .npy file", path.display()),
    }
}

/// Parses the bytes of an `.npy` file as in [`read_npy`].
pub(crate) fn parse_npy(bytes: &[u8]) -> Result<(Vec<usize>, NpyData)> {
    ensure!(bytes.len() >= 10 && &bytes[..6] == b"\x93NUMPY", "no .npy magic");
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            ensure!(bytes.len() >= 12, "truncated .npy header");
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        v => bail!("unsupported .npy version {v}"),
    };
    let data_start = header_start + header_len;
    ensure!(bytes.len() >= data_start, "truncated .npy header");
    let header = std::str::from_utf8(&bytes[header_start..data_start]).context(".npy header is not text")?;
    let field = |key: &str| -> Result<&str> {
        let pat = format!("'{key}':");
        let at = header.find(&pat).with_context(|| format!(".npy header has no {key}: {header}"))?;
        Ok(header[at + pat.len()..].trim_start())
    };
    let descr = field("descr")?;
    let (size, kind) = if descr.starts_with("'<f4'") {
        (4, 'f')
    } else if descr.starts_with("'<f2'") {
        (2, 'h')
    } else if descr.starts_with("'|i1'") {
        (1, 'i')
    } else if descr.starts_with("'|u1'") {
        (1, 'u')
    } else {
        bail!(".npy dtype is not little-endian float32, float16, int8 or uint8: {}", header.trim());
    };
    ensure!(field("fortran_order")?.starts_with("False"), ".npy array is in Fortran order");
    let shape_text = field("shape")?;
    ensure!(shape_text.starts_with('('), ".npy shape is not a tuple: {}", header.trim());
    let close = shape_text.find(')').context(".npy shape tuple is not closed")?;
    let shape = shape_text[1..close]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().with_context(|| format!(".npy shape entry `{d}` is not a number")))
        .collect::<Result<Vec<usize>>>()?;
    let count: usize = shape.iter().product();
    let data = &bytes[data_start..];
    ensure!(
        data.len() == count * size,
        ".npy shape {:?} needs {} bytes of data, file has {}",
        shape,
        count * size,
        data.len()
    );
    let values = match kind {
        'f' => NpyData::F32(data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()),
        'h' => NpyData::F16(data.chunks_exact(2).map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]]))).collect()),
        'i' => NpyData::I8(data.iter().map(|&b| b as i8).collect()),
        _ => NpyData::U8(data.to_vec()),
    };
    Ok((shape, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let mut pad = header.to_string();
        while !(10 + pad.len() + 1).is_multiple_of(64) {
            pad.push(' ');
        }
        pad.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(pad.len() as u16).to_le_bytes());
        bytes.extend_from_slice(pad.as_bytes());
        bytes.extend_from_slice(data);
        bytes
    }

    #[test]
    fn npy_parser_reads_each_type_and_checks_its_input() {
        let f: Vec<u8> = [1.0f32, 2.0, 3.0, -4.0, 0.5, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let bytes = npy("<f4", "(2, 3)", &f);
        let (shape, values) = parse_npy(&bytes).unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(values, NpyData::F32(vec![1.0, 2.0, 3.0, -4.0, 0.5, 6.0]));
        assert!(parse_npy(&bytes[..bytes.len() - 1]).is_err());
        assert!(parse_npy(&bytes.iter().map(|&b| if b == b'4' { b'8' } else { b }).collect::<Vec<_>>()).is_err());
        assert!(parse_npy(b"not numpy").is_err());
        let (_, v) = parse_npy(&npy("<f2", "(2,)", &[0x00, 0x38, 0x00, 0xBD])).unwrap();
        assert_eq!(v.tensor(Quant::IDENTITY).to_f32_vec(), vec![0.5, -1.25]);
        let (shape, v) = parse_npy(&npy("|i1", "(1, 3)", &[0xFF, 0x02, 0x80])).unwrap();
        assert_eq!((shape, v), (vec![1, 3], NpyData::I8(vec![-1, 2, -128])));
        let (_, v) = parse_npy(&npy("|u1", "(2,)", &[7, 250])).unwrap();
        assert_eq!(v, NpyData::U8(vec![7, 250]));
        let err = read_npy(Path::new("/nonexistent/x.npy")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/x.npy"), "{err}");
    }
}

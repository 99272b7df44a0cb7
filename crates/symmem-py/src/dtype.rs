//! Element types a symmetric tensor can hold, with their DLPack codes.

/// DLPack type codes (`DLDataTypeCode` in dlpack.h).
const KDL_INT: u8 = 0;
const KDL_UINT: u8 = 1;
const KDL_FLOAT: u8 = 2;
const KDL_BFLOAT: u8 = 4;
const KDL_COMPLEX: u8 = 5;
const KDL_BOOL: u8 = 6;

/// One element type: its name (as torch and numpy spell it) and its DLPack code and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DType {
    pub name: &'static str,
    pub code: u8,
    pub bits: u8,
}

impl DType {
    pub fn itemsize(self) -> usize {
        usize::from(self.bits / 8)
    }
}

const fn dtype(name: &'static str, code: u8, bits: u8) -> DType {
    DType { name, code, bits }
}

/// Every supported element type. Both torch and numpy name these the same way (numpy has no
/// bfloat16: such a tensor can still be handed to torch or kept as a DLPack object).
pub const DTYPES: &[DType] = &[
    dtype("bool", KDL_BOOL, 8),
    dtype("int8", KDL_INT, 8),
    dtype("int16", KDL_INT, 16),
    dtype("int32", KDL_INT, 32),
    dtype("int64", KDL_INT, 64),
    dtype("uint8", KDL_UINT, 8),
    dtype("uint16", KDL_UINT, 16),
    dtype("uint32", KDL_UINT, 32),
    dtype("uint64", KDL_UINT, 64),
    dtype("float16", KDL_FLOAT, 16),
    dtype("bfloat16", KDL_BFLOAT, 16),
    dtype("float32", KDL_FLOAT, 32),
    dtype("float64", KDL_FLOAT, 64),
    dtype("complex64", KDL_COMPLEX, 64),
    dtype("complex128", KDL_COMPLEX, 128),
];

/// The table of a peer-bases tensor.
pub const INT64: DType = dtype("int64", KDL_INT, 64);

pub fn lookup(name: &str) -> Option<DType> {
    DTYPES.iter().copied().find(|d| d.name == name)
}

/// `bool, int8, ...` for messages.
pub fn supported_names() -> String {
    DTYPES.iter().map(|d| d.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_widths_whole_bytes() {
        for (i, d) in DTYPES.iter().enumerate() {
            assert_eq!(d.bits % 8, 0, "{}", d.name);
            assert!(DTYPES[..i].iter().all(|e| e.name != d.name), "{}", d.name);
            assert_eq!(lookup(d.name), Some(*d));
        }
        assert_eq!(lookup("int64"), Some(INT64));
        assert_eq!(lookup("complex32"), None);
        assert_eq!(lookup("float32").map(DType::itemsize), Some(4));
    }
}

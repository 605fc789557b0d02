//! Kernel parameter types, read from the PTX that NVRTC emits next to the CUBIN.
//!
//! The CUBIN only knows parameter sizes; the PTX also says float or integer, which is what
//! lets `launch` pack a Python `2` into a `float` parameter correctly instead of as int bits.

use std::collections::HashMap;
use std::fmt;

/// How one kernel parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// An integer or pointer of this many bytes (1, 2, 4 or 8). PTX does not keep signedness.
    Int(u8),
    F32,
    F64,
    /// An aggregate (struct, __half, ...) passed by value: raw bytes.
    Bytes {
        size: u32,
        align: u32,
    },
}

impl ParamKind {
    pub fn size(&self) -> usize {
        match self {
            ParamKind::Int(n) => *n as usize,
            ParamKind::F32 => 4,
            ParamKind::F64 => 8,
            ParamKind::Bytes { size, .. } => *size as usize,
        }
    }
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamKind::Int(8) => f.write_str("pointer or 64-bit integer"),
            ParamKind::Int(n) => write!(f, "{}-bit integer", *n as u32 * 8),
            ParamKind::F32 => f.write_str("float"),
            ParamKind::F64 => f.write_str("double"),
            ParamKind::Bytes { size, .. } => write!(f, "{size}-byte struct"),
        }
    }
}

fn scalar_kind(ty: &str) -> Option<ParamKind> {
    let (class, bits) = ty.split_at(1);
    let bytes: u8 = match bits.parse::<u16>().ok()? {
        8 => 1,
        16 => 2,
        32 => 4,
        64 => 8,
        _ => return None,
    };
    match (class, bytes) {
        ("u" | "s" | "b", n) => Some(ParamKind::Int(n)),
        ("f", 4) => Some(ParamKind::F32),
        ("f", 8) => Some(ParamKind::F64),
        ("f", 2) => Some(ParamKind::Bytes { size: 2, align: 2 }),
        _ => None,
    }
}

/// Parse one `.param ...` declaration.
fn parse_param(decl: &str) -> Option<ParamKind> {
    let toks: Vec<&str> = decl.split_whitespace().collect();
    if toks.first() != Some(&".param") {
        return None;
    }
    let mut align = None;
    let mut ty = None;
    let mut i = 1;
    while i < toks.len() {
        let t = toks[i];
        if t == ".align" {
            align = toks.get(i + 1).and_then(|a| a.parse::<u32>().ok());
            i += 2;
            continue;
        }
        if let Some(rest) = t.strip_prefix('.') {
            // State spaces and pointer annotations (.ptr .global) carry no type.
            if ty.is_none() && scalar_kind(rest).is_some() {
                ty = Some(rest);
            }
        }
        i += 1;
    }
    let ty = ty?;
    let last = *toks.last()?;
    if let (Some(open), true) = (last.find('['), last.ends_with(']')) {
        // `.param .align A .b8 name[N]`: an aggregate of N elements.
        let n: u32 = last[open + 1..last.len() - 1].parse().ok()?;
        let elem = scalar_kind(ty)?.size() as u32;
        return Some(ParamKind::Bytes {
            size: n * elem,
            align: align.unwrap_or(elem),
        });
    }
    scalar_kind(ty)
}

/// Every `.entry` in a PTX module with its parameter list, keyed by (mangled) name.
pub fn entry_params(ptx: &str) -> HashMap<String, Vec<ParamKind>> {
    let mut out = HashMap::new();
    let mut rest = ptx;
    while let Some(pos) = rest.find(".entry ") {
        let after = &rest[pos + ".entry ".len()..];
        let Some(open) = after.find('(') else { break };
        let name = after[..open].trim().to_string();
        let body = &after[open + 1..];
        let Some(close) = body.find(')') else { break };
        let params = body[..close]
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .filter_map(parse_param)
            .collect();
        out.insert(name, params);
        rest = &body[close..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = r#"
.weak .entry _Z5scaleIfEvPKT_PS0_fxjd(
	.param .u64 _Z5scaleIfEvPKT_PS0_fxjd_param_0,
	.param .u64 .ptr .global .align 4 _Z5scaleIfEvPKT_PS0_fxjd_param_1,
	.param .f32 _Z5scaleIfEvPKT_PS0_fxjd_param_2,
	.param .u64 _Z5scaleIfEvPKT_PS0_fxjd_param_3,
	.param .u32 _Z5scaleIfEvPKT_PS0_fxjd_param_4,
	.param .f64 _Z5scaleIfEvPKT_PS0_fxjd_param_5
)
{ ret; }
.visible .entry k2(
	.param .u64 k2_param_0,
	.param .align 8 .b8 k2_param_1[264],
	.param .align 2 .b8 k2_param_2[2],
	.param .u8 k2_param_3
)
{ ret; }
.visible .entry noargs()
{ ret; }
"#;

    #[test]
    fn reads_scalar_pointer_and_struct_params() {
        let e = entry_params(PTX);
        assert_eq!(
            e["_Z5scaleIfEvPKT_PS0_fxjd"],
            vec![
                ParamKind::Int(8),
                ParamKind::Int(8),
                ParamKind::F32,
                ParamKind::Int(8),
                ParamKind::Int(4),
                ParamKind::F64
            ]
        );
        assert_eq!(
            e["k2"],
            vec![
                ParamKind::Int(8),
                ParamKind::Bytes {
                    size: 264,
                    align: 8
                },
                ParamKind::Bytes { size: 2, align: 2 },
                ParamKind::Int(1)
            ]
        );
        assert_eq!(e["noargs"], vec![]);
    }
}

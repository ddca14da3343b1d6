//! The textual encoding of every column kind, both ways: input cells (JSON values, CSV text,
//! Arrow values) become typed values, and Arrow values are written back as JSON or CSV text.
//! Keeping both directions in one file is what makes export followed by import lossless.
//!
//! Pure: no Lance, no I/O beyond writing into a caller's buffer.

use std::borrow::Cow;
use std::fmt::Write as _;

use arrow::array::{
    Array, AsArray, BooleanArray, FixedSizeListArray, GenericListArray, OffsetSizeTrait,
    StructArray,
};
use arrow::datatypes::{
    DataType, Date32Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde_json::Value;

use crate::model::schema::Kind;

/// One input value as a reader found it, before it is checked against a column.
#[derive(Debug, Clone)]
pub enum Cell<'a> {
    /// The column is absent from the input.
    Missing,
    Null,
    /// Text from a CSV cell (an empty cell reads as null).
    Text(&'a str),
    /// Text from a typed row: kept as it is (an empty string stays empty, as JSON's does).
    Str(&'a str),
    Json(&'a Value),
    JsonOwned(Value),
    F64(f64),
    I64(i64),
    Bool(bool),
    /// Microseconds since the epoch, UTC.
    Timestamp(i64),
    Floats(&'a [f32]),
    StrList(Vec<Option<&'a str>>),
    /// An entity's notes from a typed row.
    Notes(&'a [Note]),
}

/// An entity note: {text, added_at, expires_at}.
pub use crate::logic::rows::Note;

/// A value converted to a column's kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Typed<'a> {
    Null,
    Str(Cow<'a, str>),
    F64(f64),
    I64(i64),
    Bool(bool),
    Timestamp(i64),
    StrList(Vec<String>),
    Floats(Cow<'a, [f32]>),
    Notes(Vec<Note>),
}

impl Typed<'_> {
    pub fn is_null(&self) -> bool {
        matches!(self, Typed::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Typed::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A stable text form, used to derive ids and compare keys.
    pub fn key_text(&self) -> String {
        match self {
            Typed::Null => String::new(),
            Typed::Str(s) => s.to_string(),
            Typed::F64(v) => v.to_string(),
            Typed::I64(v) => v.to_string(),
            Typed::Bool(v) => v.to_string(),
            Typed::Timestamp(v) => format_timestamp(*v),
            Typed::StrList(v) => v.join("\u{1f}"),
            Typed::Floats(v) => format!("{} floats", v.len()),
            Typed::Notes(v) => format!("{} notes", v.len()),
        }
    }
}

fn describe(cell: &Cell) -> String {
    let text = match cell {
        Cell::Missing => "nothing".to_string(),
        Cell::Null => "null".to_string(),
        Cell::Text(s) | Cell::Str(s) => format!("'{s}'"),
        Cell::Json(v) => v.to_string(),
        Cell::JsonOwned(v) => v.to_string(),
        Cell::F64(v) => v.to_string(),
        Cell::I64(v) => v.to_string(),
        Cell::Bool(v) => v.to_string(),
        Cell::Timestamp(v) => format_timestamp(*v),
        Cell::Floats(v) => format!("a list of {} floats", v.len()),
        Cell::StrList(v) => format!("a list of {} strings", v.len()),
        Cell::Notes(v) => format!("a list of {} notes", v.len()),
    };
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Converts one input cell to the given kind. Errors are short sentences naming the value.
pub fn convert<'a>(kind: Kind, cell: &Cell<'a>) -> Result<Typed<'a>, String> {
    let json = match cell {
        Cell::Missing | Cell::Null | Cell::Json(Value::Null) => return Ok(Typed::Null),
        Cell::JsonOwned(Value::Null) => return Ok(Typed::Null),
        Cell::Text("") => return Ok(Typed::Null),
        Cell::Json(v) => Some(*v),
        Cell::JsonOwned(v) => Some(v),
        _ => None,
    };
    let fail = |what: &str| Err(format!("expected {what}, got {}", describe(cell)));
    match kind {
        Kind::Str => match (cell, json) {
            (Cell::Text(s) | Cell::Str(s), _) => Ok(Typed::Str(Cow::Borrowed(*s))),
            (Cell::Json(Value::String(s)), _) => Ok(Typed::Str(Cow::Borrowed(s.as_str()))),
            (_, Some(Value::String(s))) => Ok(Typed::Str(Cow::Owned(s.clone()))),
            (_, Some(Value::Number(n))) => Ok(Typed::Str(Cow::Owned(n.to_string()))),
            (Cell::I64(v), _) => Ok(Typed::Str(Cow::Owned(v.to_string()))),
            _ => fail("a string"),
        },
        Kind::F64 => {
            let value = match (cell, json) {
                (Cell::F64(v), _) => Some(*v),
                (Cell::I64(v), _) => Some(*v as f64),
                (Cell::Text(s), _) => s.trim().parse::<f64>().ok(),
                (_, Some(Value::Number(n))) => n.as_f64(),
                (_, Some(Value::String(s))) => s.trim().parse::<f64>().ok(),
                _ => None,
            };
            match value {
                Some(v) if v.is_finite() => Ok(Typed::F64(v)),
                Some(_) => Err(format!("expected a finite number, got {}", describe(cell))),
                None => fail("a number"),
            }
        }
        Kind::I64 => {
            let integral = |v: f64| (v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64);
            let value = match (cell, json) {
                (Cell::I64(v), _) => Some(*v),
                (Cell::F64(v), _) => integral(*v),
                (Cell::Text(s), _) => {
                    let s = s.trim();
                    s.parse::<i64>()
                        .ok()
                        .or_else(|| s.parse::<f64>().ok().and_then(integral))
                }
                (_, Some(Value::Number(n))) => n.as_i64().or_else(|| n.as_f64().and_then(integral)),
                (_, Some(Value::String(s))) => s.trim().parse::<i64>().ok(),
                _ => None,
            };
            value.map(Typed::I64).map_or_else(|| fail("an integer"), Ok)
        }
        Kind::Bool => {
            let value = match (cell, json) {
                (Cell::Bool(v), _) => Some(*v),
                (Cell::Text(s), _) => parse_bool(s),
                (_, Some(Value::Bool(v))) => Some(*v),
                (_, Some(Value::String(s))) => parse_bool(s),
                _ => None,
            };
            value
                .map(Typed::Bool)
                .map_or_else(|| fail("true or false"), Ok)
        }
        Kind::Timestamp => {
            let value = match (cell, json) {
                (Cell::Timestamp(v), _) => Some(*v),
                (Cell::Text(s), _) => parse_timestamp(s),
                (_, Some(Value::String(s))) => parse_timestamp(s),
                _ => None,
            };
            value
                .map(Typed::Timestamp)
                .map_or_else(|| fail("an RFC 3339 timestamp"), Ok)
        }
        Kind::StrList => match (cell, json) {
            (Cell::StrList(items), _) => Ok(Typed::StrList(
                items.iter().flatten().map(|s| s.to_string()).collect(),
            )),
            (Cell::Text(s), _) => match serde_json::from_str::<Value>(s) {
                Ok(v) => string_list(&v).map_or_else(|| fail("a JSON array of strings"), Ok),
                Err(_) => fail("a JSON array of strings"),
            },
            (_, Some(v)) => string_list(v).map_or_else(|| fail("an array of strings"), Ok),
            _ => fail("an array of strings"),
        },
        Kind::Embedding => match (cell, json) {
            (Cell::Floats(v), _) => Ok(Typed::Floats(Cow::Borrowed(*v))),
            (Cell::Text(s), _) => match serde_json::from_str::<Value>(s) {
                Ok(v) => float_list(&v).map_or_else(|| fail("a JSON array of numbers"), Ok),
                Err(_) => fail("a JSON array of numbers"),
            },
            (_, Some(v)) => float_list(v).map_or_else(|| fail("an array of numbers"), Ok),
            _ => fail("an array of numbers"),
        },
        Kind::Notes => {
            if let Cell::Notes(notes) = cell {
                return match notes.iter().position(|n| n.text.trim().is_empty()) {
                    Some(index) => Err(format!("note {index} has no text")),
                    None => Ok(Typed::Notes(notes.to_vec())),
                };
            }
            let parsed;
            let value = match (cell, json) {
                (Cell::Text(s), _) => match serde_json::from_str::<Value>(s) {
                    Ok(v) => {
                        parsed = v;
                        &parsed
                    }
                    Err(_) => return fail("a JSON array of notes"),
                },
                (_, Some(v)) => v,
                _ => return fail("an array of notes"),
            };
            notes(value).map(Typed::Notes)
        }
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

fn string_list(value: &Value) -> Option<Typed<'static>> {
    let items = value.as_array()?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(item.as_str()?.to_string());
    }
    Some(Typed::StrList(out))
}

fn float_list(value: &Value) -> Option<Typed<'static>> {
    let items = value.as_array()?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let v = item.as_f64()? as f32;
        if !v.is_finite() {
            return None;
        }
        out.push(v);
    }
    Some(Typed::Floats(Cow::Owned(out)))
}

fn notes(value: &Value) -> Result<Vec<Note>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| "expected an array of notes {text, added_at, expires_at}".to_string())?;
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let text = item
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| format!("note {index} has no text"))?;
        let added_at = item
            .get("added_at")
            .and_then(Value::as_str)
            .and_then(parse_timestamp)
            .ok_or_else(|| format!("note {index} has no valid added_at timestamp"))?;
        let expires_at = match item.get("expires_at") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_str()
                    .and_then(parse_timestamp)
                    .ok_or_else(|| format!("note {index} has an invalid expires_at"))?,
            ),
        };
        out.push(Note {
            text: text.to_string(),
            added_at,
            expires_at,
        });
    }
    Ok(out)
}

/// Parses RFC 3339 (any offset), or a naive `YYYY-MM-DD[ T]HH:MM:SS[.f]` or `YYYY-MM-DD`
/// taken as UTC. Returns microseconds since the epoch.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let s = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc).timestamp_micros());
    }
    for format in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
            return Some(t.and_utc().timestamp_micros());
        }
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().map(|d| {
        d.and_hms_opt(0, 0, 0)
            .expect("midnight")
            .and_utc()
            .timestamp_micros()
    })
}

/// RFC 3339 in UTC with as many fractional digits as needed (none, 3, 6).
pub use crate::logic::rows::format_timestamp;

fn timestamp_micros(array: &dyn Array, row: usize) -> Option<i64> {
    match array.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => {
            Some(array.as_primitive::<TimestampSecondType>().value(row) * 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            Some(array.as_primitive::<TimestampMillisecondType>().value(row) * 1_000)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            Some(array.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            Some(array.as_primitive::<TimestampNanosecondType>().value(row) / 1_000)
        }
        DataType::Date32 => {
            Some(array.as_primitive::<Date32Type>().value(row) as i64 * 86_400_000_000)
        }
        _ => None,
    }
}

/// Reads one Arrow value as an input cell: the Parquet import path.
pub fn arrow_cell(array: &dyn Array, row: usize) -> Cell<'_> {
    if array.is_null(row) {
        return Cell::Null;
    }
    if let Some(micros) = timestamp_micros(array, row) {
        return Cell::Timestamp(micros);
    }
    match array.data_type() {
        DataType::Utf8 => Cell::Text(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => Cell::Text(array.as_string::<i64>().value(row)),
        DataType::Utf8View => Cell::Text(array.as_string_view().value(row)),
        DataType::Float64 => Cell::F64(array.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => Cell::F64(array.as_primitive::<Float32Type>().value(row) as f64),
        DataType::Int64 => Cell::I64(array.as_primitive::<Int64Type>().value(row)),
        DataType::Int32 => Cell::I64(array.as_primitive::<Int32Type>().value(row) as i64),
        DataType::Int16 => Cell::I64(array.as_primitive::<Int16Type>().value(row) as i64),
        DataType::Int8 => Cell::I64(array.as_primitive::<Int8Type>().value(row) as i64),
        DataType::UInt32 => Cell::I64(array.as_primitive::<UInt32Type>().value(row) as i64),
        DataType::UInt16 => Cell::I64(array.as_primitive::<UInt16Type>().value(row) as i64),
        DataType::UInt8 => Cell::I64(array.as_primitive::<UInt8Type>().value(row) as i64),
        DataType::Boolean => Cell::Bool(array.as_boolean().value(row)),
        DataType::FixedSizeList(item, _) if item.data_type() == &DataType::Float32 => {
            let list = array.as_fixed_size_list();
            let size = list.value_length() as usize;
            let values = list.values().as_primitive::<Float32Type>();
            let start = list.value_offset(row) as usize;
            if values.null_count() == 0 {
                Cell::Floats(&values.values()[start..start + size])
            } else {
                Cell::JsonOwned(json_value(array, row))
            }
        }
        DataType::List(item) if item.data_type() == &DataType::Float32 => {
            let list = array.as_list::<i32>();
            let offsets = list.value_offsets();
            let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
            let values = list.values().as_primitive::<Float32Type>();
            if values.null_count() == 0 {
                Cell::Floats(&values.values()[start..end])
            } else {
                Cell::JsonOwned(json_value(array, row))
            }
        }
        DataType::List(item) if item.data_type() == &DataType::Utf8 => {
            let list = array.as_list::<i32>();
            let offsets = list.value_offsets();
            let strings = list.values().as_string::<i32>();
            let items = (offsets[row] as usize..offsets[row + 1] as usize)
                .map(|i| (!strings.is_null(i)).then(|| strings.value(i)))
                .collect();
            Cell::StrList(items)
        }
        _ => Cell::JsonOwned(json_value(array, row)),
    }
}

/// One Arrow value as a JSON value (slow path: nested columns of foreign Parquet files).
pub fn json_value(array: &dyn Array, row: usize) -> Value {
    let mut text = String::new();
    write_json(&mut text, array, row);
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

fn write_json_string(out: &mut String, s: &str) {
    // serde_json's escaping is the reference; writing into a String cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string()));
}

fn write_float(out: &mut String, v: f64) {
    if v.is_finite() {
        let _ = write!(out, "{v}");
    } else {
        out.push_str("null");
    }
}

fn write_f32(out: &mut String, v: f32) {
    if v.is_finite() {
        // Display of f32 is the shortest text that parses back to the same f32.
        let _ = write!(out, "{v}");
    } else {
        out.push_str("null");
    }
}

fn write_list<O: OffsetSizeTrait>(out: &mut String, list: &GenericListArray<O>, row: usize) {
    let offsets = list.value_offsets();
    let (start, end) = (offsets[row].as_usize(), offsets[row + 1].as_usize());
    write_range(out, list.values().as_ref(), start, end);
}

fn write_range(out: &mut String, values: &dyn Array, start: usize, end: usize) {
    out.push('[');
    if let DataType::Float32 = values.data_type() {
        let floats = values.as_primitive::<Float32Type>();
        for i in start..end {
            if i > start {
                out.push(',');
            }
            if floats.is_null(i) {
                out.push_str("null");
            } else {
                write_f32(out, floats.value(i));
            }
        }
    } else {
        for i in start..end {
            if i > start {
                out.push(',');
            }
            write_json(out, values, i);
        }
    }
    out.push(']');
}

/// Writes one Arrow value as JSON text. Timestamps become RFC 3339 strings in UTC; f32 and
/// f64 use their shortest round-trip text, so reading the text back gives the same bits.
pub fn write_json(out: &mut String, array: &dyn Array, row: usize) {
    if array.is_null(row) {
        out.push_str("null");
        return;
    }
    if let Some(micros) = timestamp_micros(array, row) {
        write_json_string(out, &format_timestamp(micros));
        return;
    }
    match array.data_type() {
        DataType::Utf8 => write_json_string(out, array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => write_json_string(out, array.as_string::<i64>().value(row)),
        DataType::Utf8View => write_json_string(out, array.as_string_view().value(row)),
        DataType::Float64 => write_float(out, array.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => write_f32(out, array.as_primitive::<Float32Type>().value(row)),
        DataType::Int64 => {
            let _ = write!(out, "{}", array.as_primitive::<Int64Type>().value(row));
        }
        DataType::Int32 => {
            let _ = write!(out, "{}", array.as_primitive::<Int32Type>().value(row));
        }
        DataType::UInt64 => {
            let _ = write!(out, "{}", array.as_primitive::<UInt64Type>().value(row));
        }
        DataType::UInt32 => {
            let _ = write!(out, "{}", array.as_primitive::<UInt32Type>().value(row));
        }
        DataType::Boolean => {
            let b: &BooleanArray = array.as_boolean();
            out.push_str(if b.value(row) { "true" } else { "false" });
        }
        DataType::List(_) => write_list(out, array.as_list::<i32>(), row),
        DataType::LargeList(_) => write_list(out, array.as_list::<i64>(), row),
        DataType::FixedSizeList(_, size) => {
            let list: &FixedSizeListArray = array.as_fixed_size_list();
            let start = list.value_offset(row) as usize;
            write_range(out, list.values().as_ref(), start, start + *size as usize);
        }
        DataType::Struct(fields) => {
            let s: &StructArray = array.as_struct();
            out.push('{');
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(out, f.name());
                out.push(':');
                write_json(out, s.column(i).as_ref(), row);
            }
            out.push('}');
        }
        _ => {
            let options = FormatOptions::default();
            match ArrayFormatter::try_new(array, &options) {
                Ok(formatter) => write_json_string(out, &formatter.value(row).to_string()),
                Err(_) => out.push_str("null"),
            }
        }
    }
}

/// Writes one Arrow value as a CSV cell: scalars as plain text, nested values as JSON text,
/// null as an empty cell.
pub fn write_csv_cell(out: &mut String, array: &dyn Array, row: usize) {
    if array.is_null(row) {
        return;
    }
    if let Some(micros) = timestamp_micros(array, row) {
        out.push_str(&format_timestamp(micros));
        return;
    }
    match array.data_type() {
        DataType::Utf8 => out.push_str(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => out.push_str(array.as_string::<i64>().value(row)),
        DataType::Utf8View => out.push_str(array.as_string_view().value(row)),
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::FixedSizeList(_, _)
        | DataType::Struct(_)
        | DataType::Float64
        | DataType::Float32
        | DataType::Int64
        | DataType::Int32
        | DataType::UInt64
        | DataType::UInt32
        | DataType::Boolean => write_json(out, array, row),
        _ => {
            let options = FormatOptions::default();
            if let Ok(formatter) = ArrayFormatter::try_new(array, &options) {
                let _ = write!(out, "{}", formatter.value(row));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: Kind, cell: Cell, expect: Result<Typed, &str>) {
        let got = convert(kind, &cell);
        match expect {
            Ok(v) => assert_eq!(got, Ok(v), "{cell:?}"),
            Err(fragment) => {
                let err = got.expect_err("should fail");
                assert!(err.contains(fragment), "{err} lacks {fragment}");
            }
        }
    }

    #[test]
    fn conversions_accept_each_input_shape_and_name_bad_values() {
        let json = serde_json::json!({"n": 0.25, "s": "x", "i": 3, "a": ["a", "b"], "bad": [1]});
        check(Kind::F64, Cell::Text("0.25"), Ok(Typed::F64(0.25)));
        check(Kind::F64, Cell::Json(&json["n"]), Ok(Typed::F64(0.25)));
        check(
            Kind::F64,
            Cell::Text("abc"),
            Err("expected a number, got 'abc'"),
        );
        check(Kind::F64, Cell::Text("NaN"), Err("finite"));
        check(Kind::I64, Cell::Json(&json["i"]), Ok(Typed::I64(3)));
        check(Kind::I64, Cell::Text("3.0"), Ok(Typed::I64(3)));
        check(Kind::I64, Cell::Text("3.5"), Err("an integer"));
        check(
            Kind::Str,
            Cell::Json(&json["s"]),
            Ok(Typed::Str("x".into())),
        );
        check(Kind::Str, Cell::Text(""), Ok(Typed::Null));
        check(Kind::Str, Cell::Json(&json["a"]), Err("a string"));
        check(
            Kind::StrList,
            Cell::Json(&json["a"]),
            Ok(Typed::StrList(vec!["a".into(), "b".into()])),
        );
        check(
            Kind::StrList,
            Cell::Json(&json["bad"]),
            Err("array of strings"),
        );
        check(Kind::StrList, Cell::Text("a;b"), Err("JSON array"));
        check(
            Kind::Embedding,
            Cell::Text("[0.5, 1]"),
            Ok(Typed::Floats(vec![0.5f32, 1.0].into())),
        );
        check(Kind::Bool, Cell::Text("yes"), Ok(Typed::Bool(true)));
        check(Kind::Timestamp, Cell::Text("yesterday"), Err("RFC 3339"));
        check(Kind::Timestamp, Cell::Missing, Ok(Typed::Null));
    }

    #[test]
    fn timestamps_parse_in_every_accepted_form_and_print_back() {
        let base = parse_timestamp("2024-05-08T13:56:00Z").unwrap();
        assert_eq!(parse_timestamp("2024-05-08T15:56:00+02:00"), Some(base));
        assert_eq!(parse_timestamp("2024-05-08 13:56:00"), Some(base));
        assert_eq!(parse_timestamp("2024-05-08 13:56"), Some(base));
        assert_eq!(
            parse_timestamp("2024-05-08"),
            Some(base - (13 * 3600 + 56 * 60) * 1_000_000)
        );
        assert_eq!(format_timestamp(base), "2024-05-08T13:56:00Z");
        assert_eq!(format_timestamp(base + 1500), "2024-05-08T13:56:00.001500Z");
        assert_eq!(
            parse_timestamp(&format_timestamp(base + 1500)),
            Some(base + 1500)
        );
        assert_eq!(parse_timestamp("8 May 2024"), None);
    }

    #[test]
    fn notes_require_text_and_added_at() {
        let good = serde_json::json!([{"text": "likes tea", "added_at": "2024-01-01T00:00:00Z"}]);
        let notes = match convert(Kind::Notes, &Cell::Json(&good)).unwrap() {
            Typed::Notes(n) => n,
            other => panic!("{other:?}"),
        };
        assert_eq!(notes[0].expires_at, None);
        let bad = serde_json::json!([{"text": "x"}]);
        assert!(
            convert(Kind::Notes, &Cell::Json(&bad))
                .unwrap_err()
                .contains("added_at")
        );
    }

    #[test]
    fn f32_text_round_trips_bit_for_bit() {
        let mut state = 0x9e3779b97f4a7c15u64;
        for _ in 0..10_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = f32::from_bits((state >> 32) as u32);
            if !v.is_finite() {
                continue;
            }
            let mut text = String::new();
            write_f32(&mut text, v);
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                (back.as_f64().unwrap() as f32).to_bits(),
                v.to_bits(),
                "{text}"
            );
        }
    }
}

//! Data checked against the labels the graph reads ([`LabelRange`], found by
//! [`graph_labels`](crate::graph::labels::graph_labels)): integer classes within the logits'
//! classes, one-hot rows as wide as the logits.

use super::HostTensor;
use crate::error::{Error, Result};
use crate::graph::labels::LabelRange;

/// Checks `tensor`, rows `first_row..` of input `input` of the data set `file`, against `range`:
/// every integer value is a class in `[0, classes)` (float, boolean and string values are not
/// integer classes and pass), or, for one-hot labels, every row has `classes` elements.
///
/// # Errors
/// [`Error::DataValue`] naming the file, the input, the row, the value and the classes;
/// [`Error::LabelWidth`] for one-hot rows of another width.
pub fn check_label_values(
    range: &LabelRange,
    file: &str,
    input: &str,
    tensor: &HostTensor,
    first_row: usize,
) -> Result<()> {
    if range.one_hot {
        let width = tensor.row_len() as u64;
        if width != range.classes {
            return Err(Error::LabelWidth {
                file: file.into(),
                input: input.into(),
                width,
                classes: range.classes,
                logits: range.logits.clone(),
            });
        }
        return Ok(());
    }
    match tensor.first_outside_classes(range.classes) {
        Some((row, value)) => Err(Error::DataValue {
            file: file.into(),
            input: input.into(),
            row: first_row + row,
            reason: format!(
                "label {value} is outside the {c} classes [0, {c}) of `{}`",
                range.logits,
                c = range.classes
            ),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Values;

    fn range(classes: u64, one_hot: bool) -> LabelRange {
        LabelRange {
            classes,
            one_hot,
            logits: "l".into(),
        }
    }

    #[test]
    fn labels_outside_the_classes_name_row_value_and_range() {
        let ok = HostTensor::new(vec![4], Values::I64(vec![0, 3, 1, 2])).unwrap();
        check_label_values(&range(4, false), "d.npz", "y", &ok, 0).unwrap();
        let high = HostTensor::new(vec![4], Values::I64(vec![0, 3, 4, 2])).unwrap();
        let e = check_label_values(&range(4, false), "d.npz", "y", &high, 100).unwrap_err();
        assert!(
            matches!(&e, Error::DataValue { row: 102, input, .. } if input == "y"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("label 4 is outside the 4 classes [0, 4) of `l`"),
            "{e}"
        );
        assert!(e.to_string().contains("d.npz"), "{e}");
        let low = HostTensor::new(vec![2], Values::I32(vec![1, -1])).unwrap();
        let e = check_label_values(&range(4, false), "d.npz", "y", &low, 0).unwrap_err();
        assert!(e.to_string().contains("row 1: label -1 is outside"), "{e}");
        // Rows of several labels (a sequence): the row of the bad element.
        let seq = HostTensor::new(vec![3, 2], Values::U8(vec![0, 1, 2, 3, 9, 0])).unwrap();
        let e = check_label_values(&range(4, false), "d.npz", "y", &seq, 0).unwrap_err();
        assert!(matches!(e, Error::DataValue { row: 2, .. }), "{e}");
        // Floats are no integer classes: not this check's business.
        let floats = HostTensor::new(vec![2], Values::F32(vec![7.0, -3.0])).unwrap();
        check_label_values(&range(4, false), "d.npz", "y", &floats, 0).unwrap();
    }

    #[test]
    fn one_hot_rows_must_be_as_wide_as_the_logits() {
        let rows = HostTensor::new(vec![2, 3], Values::F32(vec![0.0; 6])).unwrap();
        check_label_values(&range(3, true), "d.npz", "y", &rows, 0).unwrap();
        let e = check_label_values(&range(5, true), "d.npz", "y", &rows, 0).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::LabelWidth {
                    width: 3,
                    classes: 5,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("`y`") && e.to_string().contains("`l`"),
            "{e}"
        );
    }
}

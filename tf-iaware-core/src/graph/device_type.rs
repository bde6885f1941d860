//! [`DeviceType`]: the kind of a TensorFlow device (`CPU`, `GPU`, …) as a type, so code matches
//! on it instead of comparing strings.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The type of a device, or a device type a kernel is registered for, as TensorFlow names it.
///
/// Parsed without regard to case (`cpu` is [`DeviceType::Cpu`]); written back, in
/// [`Display`](fmt::Display), serde and [`DeviceType::as_str`], the way TensorFlow writes it:
/// `CPU`, `GPU`, `TPU`, `DEFAULT`, and other types upper case (`XLA_CPU`, `TPU_SYSTEM`, …). A
/// string TensorFlow wrote therefore reads and writes back byte for byte.
///
/// ```
/// use tf_iaware_core::graph::DeviceType;
///
/// assert_eq!("GPU".parse::<DeviceType>().unwrap(), DeviceType::Gpu);
/// assert_eq!(DeviceType::from("cpu"), DeviceType::Cpu);
/// assert_eq!(DeviceType::from("xla_cpu").to_string(), "XLA_CPU");
/// assert_eq!(serde_json::to_string(&DeviceType::Cpu).unwrap(), r#""CPU""#);
/// ```
///
/// Equality, order and hashing are those of [`DeviceType::as_str`], so types sort as their
/// names do (tables keyed by type keep the order they had as strings).
#[derive(Clone, Debug)]
pub enum DeviceType {
    /// `CPU`.
    Cpu,
    /// `GPU`.
    Gpu,
    /// `TPU`.
    Tpu,
    /// `DEFAULT`: the kernel device type of kernels TensorFlow registers for every device
    /// (`NoOp`, …); not the type of any device.
    Default,
    /// Any other type, upper case (`XLA_CPU`, `TPU_SYSTEM`, …; parsing and `From` make it so).
    Other(String),
}

impl DeviceType {
    /// The type named `name`, in any case (see the type's docs).
    pub(crate) fn parse(name: &str) -> Self {
        for known in [
            DeviceType::Cpu,
            DeviceType::Gpu,
            DeviceType::Tpu,
            DeviceType::Default,
        ] {
            if name.eq_ignore_ascii_case(known.as_str()) {
                return known;
            }
        }
        DeviceType::Other(name.to_ascii_uppercase())
    }

    /// The name as TensorFlow writes it (`CPU`, `GPU`, …).
    pub fn as_str(&self) -> &str {
        match self {
            DeviceType::Cpu => "CPU",
            DeviceType::Gpu => "GPU",
            DeviceType::Tpu => "TPU",
            DeviceType::Default => "DEFAULT",
            DeviceType::Other(name) => name,
        }
    }

    /// TensorFlow's placement priority of the type (higher first): TPU, then GPU, then CPU, then
    /// the rest.
    pub(crate) fn priority(&self) -> u8 {
        match self {
            DeviceType::Tpu => 3,
            DeviceType::Gpu => 2,
            DeviceType::Cpu => 1,
            DeviceType::Default | DeviceType::Other(_) => 0,
        }
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeviceType {
    type Err = Infallible;

    /// The type named `s`, in any case (see the type's docs); never fails.
    fn from_str(s: &str) -> Result<Self, Infallible> {
        Ok(DeviceType::parse(s))
    }
}

impl From<&str> for DeviceType {
    fn from(name: &str) -> Self {
        DeviceType::parse(name)
    }
}

impl From<String> for DeviceType {
    fn from(name: String) -> Self {
        match DeviceType::parse(&name) {
            // Already upper case: keep the allocation.
            DeviceType::Other(_) if !name.bytes().any(|b| b.is_ascii_lowercase()) => {
                DeviceType::Other(name)
            }
            t => t,
        }
    }
}

impl PartialEq for DeviceType {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for DeviceType {}

impl std::hash::Hash for DeviceType {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for DeviceType {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DeviceType {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Serialize for DeviceType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DeviceType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(DeviceType::from(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensorflow_names_round_trip_and_case_is_ignored() {
        for (name, ty) in [
            ("CPU", DeviceType::Cpu),
            ("GPU", DeviceType::Gpu),
            ("TPU", DeviceType::Tpu),
            ("DEFAULT", DeviceType::Default),
            ("XLA_CPU", DeviceType::Other("XLA_CPU".into())),
            ("TPU_SYSTEM", DeviceType::Other("TPU_SYSTEM".into())),
        ] {
            assert_eq!(DeviceType::parse(name), ty);
            assert_eq!(ty.to_string(), name);
            let json = serde_json::to_string(&ty).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<DeviceType>(&json).unwrap(), ty);
        }
        assert_eq!(DeviceType::parse("cpu"), DeviceType::Cpu);
        assert_eq!(DeviceType::parse("Gpu"), DeviceType::Gpu);
        assert_eq!(DeviceType::parse("xla_gpu").as_str(), "XLA_GPU");
        assert!(DeviceType::Gpu.priority() > DeviceType::Cpu.priority());
        assert!(DeviceType::Tpu.priority() > DeviceType::Gpu.priority());
        assert_eq!(DeviceType::parse("XLA_CPU").priority(), 0);
        // Ordered as the names: tables keyed by type keep their order.
        let mut v = [
            DeviceType::parse("XLA_CPU"),
            DeviceType::Gpu,
            DeviceType::Default,
            DeviceType::Cpu,
        ];
        v.sort();
        let names: Vec<&str> = v.iter().map(DeviceType::as_str).collect();
        assert_eq!(names, ["CPU", "DEFAULT", "GPU", "XLA_CPU"]);
    }
}

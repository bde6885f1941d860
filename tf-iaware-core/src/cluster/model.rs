//! The cluster model's items under their earlier path, `cluster::model::*`: [`Cluster`],
//! [`Device`] and [`Link`] now live in `cluster::{device, link, topology}`, the calibration
//! profile and its fits in [`cluster::calibration`](super::calibration). Re-exported here so
//! code written against this path keeps compiling.

pub use super::calibration::fit::{ComputeFit, LinkFit};
pub use super::calibration::profile::{
    capability, CalibrationProfile, DeviceCalibration, LinkCalibration, MIN_AVAILABILITY,
    PROFILE_FORMAT,
};
pub use super::device::{Device, DeviceId};
pub use super::link::{Link, LinkDefaults, LinkSpec};
pub use super::topology::{Cluster, OpTypeCost};

//! Calibration: the pure fits that turn timed runs into figures ([`fit`]) and the profile
//! that stores them and applies them to a cluster ([`profile`]).

pub mod fit;
pub mod profile;

pub use fit::{ComputeFit, LinkFit};
pub use profile::{
    capability, CalibrationProfile, DeviceCalibration, LinkCalibration, MIN_AVAILABILITY,
    PROFILE_FORMAT,
};

//! Calibration: the pure fits that turn timed runs into figures ([`fit`]) and the profile
//! that stores them and applies them to a cluster ([`profile`]).

pub mod fit;
pub mod profile;

pub use fit::{
    bound_step_line, fit_step_line, ComputeFit, LinkFit, StepLine, FLAT_LINE_RATIO,
    MAX_CPU_CORE_FLOPS,
};
pub use profile::{
    capability, CalibrationProfile, DeviceCalibration, LinkCalibration, MIN_AVAILABILITY,
    PROFILE_FORMAT,
};

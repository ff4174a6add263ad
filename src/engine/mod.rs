//! What a communicator does around its calls, pure in the sans-IO sense
//! (told the time, generic over its I/O), so that the component and the
//! simulator run the same code.

pub mod algorithm;
pub mod call;
pub mod choice;
pub mod inherited;
pub mod queue;
pub mod tuning;

//! Embedders: the text-to-vector models memlife can use. Each one names itself, and the
//! database records that name beside every vector, so vectors of different models never mix.

pub mod hash;

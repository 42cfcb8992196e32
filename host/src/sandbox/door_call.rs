//! The `host.call` host function of a core module (see `door.rs`): the
//! frame read from the guest's memory, handed through the store's door,
//! the answer written where the guest's `host_alloc` says.

use super::door::{HOST_FAULT, MAX_ANSWER, MAX_FRAME, NO_HOST};
use super::store::CallState;
use tokio::sync::oneshot;
use wasmtime::{Caller, Extern};

/// Links `host.call` into `linker`: through the store's door when it has one.
pub(crate) fn link(linker: &mut wasmtime::Linker<CallState>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        "host",
        "call",
        |caller: Caller<'_, CallState>, (ptr, len, out_ptr, out_len): (i32, i32, i32, i32)| {
            Box::new(async move {
                let at = [ptr, len, out_ptr, out_len].map(|v| v as u32);
                call(caller, at).await
            })
        },
    )?;
    Ok(())
}

/// The door's answer to one frame: 0 (answered), [`NO_HOST`] or [`HOST_FAULT`].
async fn call(mut caller: Caller<'_, CallState>, at: [u32; 4]) -> wasmtime::Result<i32> {
    let [ptr, len, out_ptr, out_len] = at;
    let Some(door) = caller.data().door.clone() else {
        return Ok(NO_HOST);
    };
    // A guest that cannot take an answer (no `host_alloc`) has no host.
    let Some(alloc) = caller
        .get_export("host_alloc")
        .and_then(Extern::into_func)
        .and_then(|f| f.typed::<i32, i32>(&caller).ok())
    else {
        return Ok(NO_HOST);
    };
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return Ok(HOST_FAULT);
    };
    let size = memory.data_size(&caller) as u64;
    let fits = |p: u32, n: u64| u64::from(p) + n <= size;
    if len > MAX_FRAME || !fits(ptr, len.into()) || !fits(out_ptr, 4) || !fits(out_len, 4) {
        return Ok(HOST_FAULT);
    }
    let mut frame = vec![0u8; len as usize];
    if memory.read(&caller, ptr as usize, &mut frame).is_err() {
        return Ok(HOST_FAULT);
    }
    let (reply, answer) = oneshot::channel();
    if door.0.send((frame, reply)).await.is_err() {
        return Ok(NO_HOST);
    }
    let Ok(answer) = answer.await else {
        return Ok(HOST_FAULT);
    };
    write_answer(&mut caller, (memory, alloc), &answer, out_ptr, out_len).await
}

/// Writes `answer` into `memory` where the guest's `alloc` (its
/// `host_alloc`) says, and its
/// address and length at `out_ptr` and `out_len`.
async fn write_answer(
    caller: &mut Caller<'_, CallState>,
    (memory, alloc): (wasmtime::Memory, wasmtime::TypedFunc<i32, i32>),
    answer: &[u8],
    out_ptr: u32,
    out_len: u32,
) -> wasmtime::Result<i32> {
    if answer.len() > MAX_ANSWER {
        return Ok(HOST_FAULT);
    }
    let p = alloc.call_async(&mut *caller, answer.len() as i32).await? as u32;
    let size = memory.data_size(&*caller) as u64;
    if p == 0 || u64::from(p) + answer.len() as u64 > size {
        return Ok(HOST_FAULT);
    }
    let written = memory
        .write(&mut *caller, p as usize, answer)
        .and_then(|()| memory.write(&mut *caller, out_ptr as usize, &p.to_le_bytes()))
        .and_then(|()| {
            let n = answer.len() as u32;
            memory.write(&mut *caller, out_len as usize, &n.to_le_bytes())
        });
    Ok(if written.is_ok() { 0 } else { HOST_FAULT })
}

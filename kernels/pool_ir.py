"""LLVM IR of the thread pool's runtime (see :mod:`kernels.threads`): ``@gt_parallel`` and ``@gt_worker``.

One job at a time is described by globals; the 64-bit ``@gt_state`` word holds the
job's epoch (high 32 bits, odd while the master rewrites the job). The items are split
into one band per thread (seat 0: the caller; pool workers take seats 1, 2, ... as they
join), each with its own cursor word (epoch | next item). A thread claims chunks of its
own band first, then of the others' (a late or descheduled thread's band is done by the
rest), with a compare-and-swap that also checks the epoch, so a worker that wakes up
late can never take an item of another job; the master waits only for items that were
claimed (``@gt_done`` counts the finished ones), never for a worker that has not turned up.

Why bands: kernels number their items channel-chunk or row major alike, so the thread
that wrote part of a tensor in one step mostly reads the same part in the next, from its
own L2. One shared cursor (dealing chunks to whichever thread asks first) made a
consumer's reads land in the other core's cache about half the time. Measured end to end
(``benchmarks/pool_ab.py``, same program both ways, Zen 4, 2 threads, the plans of its own
logs): one cursor took 1.018x the banded time on MobileNet-v2, 1.023x on DenseNet-121, 1.027x
on Inception-v3, ResNet-18/50 within noise (0.99-1.01x); with other plans (Zen 5's logs)
DenseNet-121 went the other way, 0.978x (benchmarks/README.md). Idle workers spin on
``@gt_state`` for a while, then sleep on a futex (``@gt_wake``).
"""
from __future__ import annotations

from kernels.threads import MAX_THREADS

MAX_SEATS = MAX_THREADS  # band cursors: a job of more threads shares the last ones out (clamped in gt_parallel)
SPIN = 32000  # pause instructions (~0.5 ms here) an idle worker spins before it sleeps
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE, SYS_FUTEX, SYS_SCHED_YIELD = 128, 129, 202, 24  # x86-64 Linux

RUNTIME_IR = f"""
@gt_state = global i64 0, align 64
@gt_done = global i64 0, align 64
@gt_body = global ptr null, align 64
@gt_args = global ptr null, align 8
@gt_total = global i64 0, align 8
@gt_chunk = global i64 0, align 8
@gt_ahead = global i32 0, align 8
@gt_seats = global i32 0, align 8
@gt_joined = global i32 0, align 64
@gt_wake = global i32 0, align 64
@gt_sleepers = global i32 0, align 64
@gt_stop = global i32 0, align 64
@gt_lock = global i32 0, align 64
@gt_nbands = global i64 0, align 64
@gt_banded = global i32 1, align 64  ; 0: one band, every thread claims from one cursor (A/B benchmarks)
; One cursor per seat (64 bytes apart: no false sharing), epoch | next item of its band.
@gt_bands = global [{MAX_SEATS} x [8 x i64]] zeroinitializer, align 64

declare void @llvm.x86.sse2.pause()
declare i64 @syscall(i64, ...)

; Claim [start, end) of job `epoch` for the thread in `seat`: a chunk of its own band of the
; items (band k: [k * total / nbands, (k + 1) * total / nbands)), else of the next band with
; items left; start = -1 when the job has nothing left (or is gone).
define internal {{i64, i64}} @gt_claim(i64 %epoch, i64 %total, i64 %chunk, i64 %seat, i64 %nbands) nounwind {{
entry:
  br label %band
band:
  %k = phi i64 [0, %entry], [%k1, %next]
  %more = icmp slt i64 %k, %nbands
  br i1 %more, label %pick, label %none
pick:
  %sk = add i64 %seat, %k
  %b = urem i64 %sk, %nbands
  %b1 = add i64 %b, 1
  %bt = mul i64 %b1, %total
  %bend = udiv i64 %bt, %nbands
  %cursor = getelementptr [{MAX_SEATS} x [8 x i64]], ptr @gt_bands, i64 0, i64 %b, i64 0
  br label %try
try:
  %s = load atomic i64, ptr %cursor seq_cst, align 8
  %e = lshr i64 %s, 32
  %i = and i64 %s, 4294967295
  %same = icmp eq i64 %e, %epoch
  %left = icmp slt i64 %i, %bend
  %ok = and i1 %same, %left
  br i1 %ok, label %cas, label %next
cas:
  %want = add i64 %s, %chunk
  %r = cmpxchg ptr %cursor, i64 %s, i64 %want seq_cst seq_cst, align 8
  %won = extractvalue {{i64, i1}} %r, 1
  br i1 %won, label %got, label %try
got:
  %e0 = add i64 %i, %chunk
  %lt = icmp slt i64 %e0, %bend
  %end = select i1 %lt, i64 %e0, i64 %bend
  %a = insertvalue {{i64, i64}} undef, i64 %i, 0
  %c = insertvalue {{i64, i64}} %a, i64 %end, 1
  ret {{i64, i64}} %c
next:
  %k1 = add i64 %k, 1
  br label %band
none:
  ret {{i64, i64}} {{i64 -1, i64 0}}
}}

define internal void @gt_call(ptr %body, ptr %args, i32 %ahead, i64 %i, i64 %next) nounwind {{
entry:
  %two = icmp eq i32 %ahead, 0
  br i1 %two, label %plain, label %next_aware
plain:
  call void %body(ptr %args, i64 %i)
  ret void
next_aware:
  call void %body(ptr %args, i64 %i, i64 %next)
  ret void
}}

; Run claimed chunks of job `epoch` until none is left. A next-aware body learns the item
; its thread runs next: the last item of a chunk waits for the next claim.
define internal void @gt_work(i64 %epoch, ptr %body, ptr %args, i64 %total, i64 %chunk, i32 %ahead, i64 %seat,
                             i64 %nbands) nounwind {{
entry:
  %c0 = call {{i64, i64}} @gt_claim(i64 %epoch, i64 %total, i64 %chunk, i64 %seat, i64 %nbands)
  br label %chunk_head
chunk_head:
  %c = phi {{i64, i64}} [%c0, %entry], [%cn, %chunk_done]
  %start = extractvalue {{i64, i64}} %c, 0
  %end = extractvalue {{i64, i64}} %c, 1
  %have = icmp sge i64 %start, 0
  br i1 %have, label %items_pre, label %out
items_pre:
  %lastitem = add i64 %end, -1
  br label %items
items:
  %i = phi i64 [%start, %items_pre], [%inext, %item]
  %more = icmp slt i64 %i, %lastitem
  br i1 %more, label %item, label %last
item:
  %inext = add i64 %i, 1
  call void @gt_call(ptr %body, ptr %args, i32 %ahead, i64 %i, i64 %inext)
  br label %items
last:
  %cn = call {{i64, i64}} @gt_claim(i64 %epoch, i64 %total, i64 %chunk, i64 %seat, i64 %nbands)
  %ns = extractvalue {{i64, i64}} %cn, 0
  call void @gt_call(ptr %body, ptr %args, i32 %ahead, i64 %lastitem, i64 %ns)
  %n = sub i64 %end, %start
  %old = atomicrmw add ptr @gt_done, i64 %n seq_cst, align 8
  br label %chunk_done
chunk_done:
  br label %chunk_head
out:
  ret void
}}

define internal void @gt_serial(ptr %body, ptr %args, i64 %total, i32 %ahead) nounwind {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%inext, %step]
  %in = icmp slt i64 %i, %total
  br i1 %in, label %step, label %done
step:
  %inext = add i64 %i, 1
  %islast = icmp eq i64 %inext, %total
  %nx = select i1 %islast, i64 -1, i64 %inext
  call void @gt_call(ptr %body, ptr %args, i32 %ahead, i64 %i, i64 %nx)
  br label %loop
done:
  ret void
}}

; Run body(args, item[, next]) for item in [0, total) on this thread and up to
; nthreads - 1 pool workers.
define void @gt_parallel(ptr %body, ptr %args, i64 %total, i64 %chunk, i32 %ahead, i32 %nthreads) nounwind {{
entry:
  %few = icmp sle i32 %nthreads, 1
  %small = icmp sle i64 %total, 1
  %serial = or i1 %few, %small
  br i1 %serial, label %alone, label %lock
lock:
  %l = atomicrmw xchg ptr @gt_lock, i32 1 seq_cst, align 4
  %busy = icmp ne i32 %l, 0
  br i1 %busy, label %alone, label %open
alone:
  call void @gt_serial(ptr %body, ptr %args, i64 %total, i32 %ahead)
  ret void
open:
  %s = load atomic i64, ptr @gt_state seq_cst, align 8
  %e = lshr i64 %s, 32
  %ebase = and i64 %e, 4294967294
  %closed_e0 = add i64 %ebase, 3
  %closed_e = and i64 %closed_e0, 4294967295
  %closed_hi = shl i64 %closed_e, 32
  %closed = or i64 %closed_hi, 4294967295
  store atomic i64 %closed, ptr @gt_state seq_cst, align 8
  store atomic ptr %body, ptr @gt_body seq_cst, align 8
  store atomic ptr %args, ptr @gt_args seq_cst, align 8
  store atomic i64 %total, ptr @gt_total seq_cst, align 8
  store atomic i64 %chunk, ptr @gt_chunk seq_cst, align 8
  store atomic i32 %ahead, ptr @gt_ahead seq_cst, align 4
  %seats = sub i32 %nthreads, 1
  store atomic i32 %seats, ptr @gt_seats seq_cst, align 4
  store atomic i32 0, ptr @gt_joined seq_cst, align 4
  store atomic i64 0, ptr @gt_done seq_cst, align 8
  %epoch0 = add i64 %ebase, 4
  %epoch = and i64 %epoch0, 4294967295  ; wraps after 2^30 jobs
  %open_s = shl i64 %epoch, 32
  %banded = load atomic i32, ptr @gt_banded seq_cst, align 4
  %one = icmp eq i32 %banded, 0
  %nt64 = sext i32 %nthreads to i64
  %fits = icmp slt i64 %nt64, {MAX_SEATS}
  %ntb = select i1 %fits, i64 %nt64, i64 {MAX_SEATS}  ; no cursor past @gt_bands: more seats share them
  %nb = select i1 %one, i64 1, i64 %ntb
  store atomic i64 %nb, ptr @gt_nbands seq_cst, align 8
  br label %bands
bands:
  %k = phi i64 [0, %open], [%k1, %bands]
  %kt = mul i64 %k, %total
  %kstart = udiv i64 %kt, %nb
  %kword = or i64 %open_s, %kstart
  %kcursor = getelementptr [{MAX_SEATS} x [8 x i64]], ptr @gt_bands, i64 0, i64 %k, i64 0
  store atomic i64 %kword, ptr %kcursor seq_cst, align 8
  %k1 = add i64 %k, 1
  %kmore = icmp slt i64 %k1, %nb
  br i1 %kmore, label %bands, label %publish
publish:
  store atomic i64 %open_s, ptr @gt_state seq_cst, align 8
  %sl = load atomic i32, ptr @gt_sleepers seq_cst, align 4
  %anyone = icmp sgt i32 %sl, 0
  br i1 %anyone, label %wake, label %work
wake:
  %w = atomicrmw add ptr @gt_wake, i32 1 seq_cst, align 4
  %wr = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr @gt_wake, i64 {FUTEX_WAKE_PRIVATE}, i64 2147483647)
  br label %work
work:
  call void @gt_work(i64 %epoch, ptr %body, ptr %args, i64 %total, i64 %chunk, i32 %ahead, i64 0, i64 %nb)
  br label %wait
wait:
  %waited = phi i32 [0, %work], [%waited1, %pause], [0, %yield]
  %d = load atomic i64, ptr @gt_done seq_cst, align 8
  %finished = icmp sge i64 %d, %total
  br i1 %finished, label %release, label %pause
pause:
  ; A worker still running claimed items may share this CPU (the kernel often wakes a
  ; sleeper onto its waker's CPU): after a short spin, yield the CPU to it.
  call void @llvm.x86.sse2.pause()
  %waited1 = add i32 %waited, 1
  %long = icmp sgt i32 %waited1, 200
  br i1 %long, label %yield, label %wait
yield:
  %y = call i64 (i64, ...) @syscall(i64 {SYS_SCHED_YIELD})
  br label %wait
release:
  store atomic i32 0, ptr @gt_lock seq_cst, align 4
  ret void
}}

; A pool thread: take a seat in every job it sees open, spin a while when idle, then sleep.
define ptr @gt_worker(ptr %unused) nounwind {{
entry:
  br label %top
top:
  %seen = phi i64 [-1, %entry], [%seen, %spin], [%e, %job], [%seen, %slept], [%e, %skip]
  %spins = phi i32 [0, %entry], [%spins1, %spin], [0, %job], [0, %slept], [0, %skip]
  %stop = load atomic i32, ptr @gt_stop seq_cst, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %look
look:
  %s = load atomic i64, ptr @gt_state seq_cst, align 8
  %e = lshr i64 %s, 32
  %odd = and i64 %e, 1
  %open = icmp eq i64 %odd, 0
  %new = icmp ne i64 %e, %seen
  %fresh = and i1 %open, %new
  br i1 %fresh, label %read, label %idle
read:
  %body = load atomic ptr, ptr @gt_body seq_cst, align 8
  %args = load atomic ptr, ptr @gt_args seq_cst, align 8
  %total = load atomic i64, ptr @gt_total seq_cst, align 8
  %chunk = load atomic i64, ptr @gt_chunk seq_cst, align 8
  %ahead = load atomic i32, ptr @gt_ahead seq_cst, align 4
  %seats = load atomic i32, ptr @gt_seats seq_cst, align 4
  %nbands = load atomic i64, ptr @gt_nbands seq_cst, align 8
  %s2 = load atomic i64, ptr @gt_state seq_cst, align 8
  %e2 = lshr i64 %s2, 32
  %stable = icmp eq i64 %e2, %e
  br i1 %stable, label %seat, label %idle
seat:
  %j = atomicrmw add ptr @gt_joined, i32 1 seq_cst, align 4
  %room = icmp slt i32 %j, %seats
  br i1 %room, label %job, label %skip
job:
  %j1 = add i32 %j, 1
  %myseat = sext i32 %j1 to i64
  call void @gt_work(i64 %e, ptr %body, ptr %args, i64 %total, i64 %chunk, i32 %ahead, i64 %myseat, i64 %nbands)
  br label %top
skip:
  br label %top
idle:
  %spins1 = add i32 %spins, 1
  %tired = icmp sgt i32 %spins1, {SPIN}
  br i1 %tired, label %sleep, label %spin
spin:
  call void @llvm.x86.sse2.pause()
  br label %top
sleep:
  %w = load atomic i32, ptr @gt_wake seq_cst, align 4
  %w64 = zext i32 %w to i64
  %a = atomicrmw add ptr @gt_sleepers, i32 1 seq_cst, align 4
  %s3 = load atomic i64, ptr @gt_state seq_cst, align 8
  %still = icmp eq i64 %s3, %s
  %st2 = load atomic i32, ptr @gt_stop seq_cst, align 4
  %nostop = icmp eq i32 %st2, 0
  %doze = and i1 %still, %nostop
  br i1 %doze, label %futex, label %awake
futex:
  %fr = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr @gt_wake, i64 {FUTEX_WAIT_PRIVATE}, i64 %w64, ptr null)
  br label %awake
awake:
  %b = atomicrmw sub ptr @gt_sleepers, i32 1 seq_cst, align 4
  br label %slept
slept:
  br label %top
exit:
  ret ptr null
}}

; Stop the workers (at interpreter exit): they leave their loop, sleepers are woken.
define void @gt_shutdown() nounwind {{
entry:
  store atomic i32 1, ptr @gt_stop seq_cst, align 4
  %w = atomicrmw add ptr @gt_wake, i32 1 seq_cst, align 4
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr @gt_wake, i64 {FUTEX_WAKE_PRIVATE}, i64 2147483647)
  ret void
}}
"""

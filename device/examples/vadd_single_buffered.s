; The same z = x + y as vadd_double_buffered.s with one set of buffers:
; every tile's load waits for the previous tile's store, so copies and
; compute never overlap. Kept as the baseline the cycle model is tested
; against (the double-buffered version must take fewer cycles).
.kernel vadd_sb aiv
.gm x f32 [100000] in
.gm y f32 [100000] in
.gm z f32 [100000] out
.arg n 100000
    ldarg r0, 0
    movi r1, 0
    setf mte3, mte2, 0
loop:
    sub r2, r0, r1
    min r2, r2, 4096
    waitf mte3, mte2, 0
    ld f32, 1x4096, 1, r2, @0x0, x, r1, 0
    ld f32, 1x4096, 1, r2, @0x4000, y, r1, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vadd f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x4096, 1, r2, z, r1, 0, @0x8000
    setf mte3, mte2, 0
    add r1, r1, 4096
    blt r1, r0, loop
    waitf mte3, mte2, 0
    end

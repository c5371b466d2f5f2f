; lower/int_ops.graph compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_mul_lt_select_cast_pow_and_3_more (class Flat)
; core function 0: units Kernel, tile 2048, buffers [b0,b1,b2,b3], workspace []
.kernel k_fused_mul_lt_select_cast_pow_and_3_more aiv
.gm b0_0 i32 [] inout
.gm b1_1 i32 [] inout
.gm b2_2 u8 [] inout
.gm b3_3 i64 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 7
    ldarg r6, 8
    ldarg r7, 9
    ldarg r8, 10
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L8:
    bge r0, r1, L61
    sub r2, r1, r0
    min r2, r2, 2048
    waitf mte3, mte2, 0
    add r3, r5, r0
    ld i32, 1x2048, 1, r2, @0x0, b0_0, r3, 0
    add r3, r6, r0
    ld i32, 1x2048, 1, r2, @0x4000, b1_1, r3, 0
    add r3, r7, r0
    ld u8, 1x2048, 1, r2, @0x8000, b2_2, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vcmp i32, 1x2048, 1, r2, lt, @0xc000, @0x0, @0x4000
    vmul i32, 1x2048, 1, r2, @0x10000, @0x0, @0x4000
    vsel i32, 1x2048, 1, r2, @0x0, @0xc000, @0x10000, @0x4000
    vcast i64, i32, 1x2048, 1, r2, @0x10000, @0x0
    vpow i64, 1x2048, 1, r2, @0x0, @0x10000, @0x10000
    vadd u8, 1x2048, 1, r2, @0x10000, @0x8000, @0x8000
    vcast i64, u8, 1x2048, 1, r2, @0x8000, @0x10000
    vsub i64, 1x2048, 1, r2, @0x10000, @0x0, @0x8000
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r8, r0
    st i64, 1x2048, 1, r2, b3_3, r4, 0, @0x10000
    setf mte3, mte2, 0
    add r0, r0, 2048
    bge r0, r1, L61
    sub r2, r1, r0
    min r2, r2, 2048
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld i32, 1x2048, 1, r2, @0x140e0, b0_0, r3, 0
    add r3, r6, r0
    ld i32, 1x2048, 1, r2, @0x180e0, b1_1, r3, 0
    add r3, r7, r0
    ld u8, 1x2048, 1, r2, @0x1c0e0, b2_2, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vcmp i32, 1x2048, 1, r2, lt, @0x200e0, @0x140e0, @0x180e0
    vmul i32, 1x2048, 1, r2, @0x240e0, @0x140e0, @0x180e0
    vsel i32, 1x2048, 1, r2, @0x140e0, @0x200e0, @0x240e0, @0x180e0
    vcast i64, i32, 1x2048, 1, r2, @0x240e0, @0x140e0
    vpow i64, 1x2048, 1, r2, @0x140e0, @0x240e0, @0x240e0
    vadd u8, 1x2048, 1, r2, @0x240e0, @0x1c0e0, @0x1c0e0
    vcast i64, u8, 1x2048, 1, r2, @0x1c0e0, @0x240e0
    vsub i64, 1x2048, 1, r2, @0x240e0, @0x140e0, @0x1c0e0
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r8, r0
    st i64, 1x2048, 1, r2, b3_3, r4, 0, @0x240e0
    setf mte3, mte2, 1
    add r0, r0, 2048
    jmp L8
L61:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; fusion/shared_in_one_kernel.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_sigmoid_mul_add (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1,b2], workspace []
.kernel k_fused_sigmoid_mul_add aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.gm b2_2 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 6
    ldarg r6, 7
    ldarg r7, 8
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L7:
    bge r0, r1, L46
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x0, b0_0, r3, 0
    add r3, r6, r0
    ld f32, 1x4096, 1, r2, @0x4000, b1_1, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vunary f32, 1x4096, 1, r2, @0x8000, @0x0, sigmoid
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    vadd f32, 1x4096, 1, r2, @0x4000, @0x0, @0x8000
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r7, r0
    st f32, 1x4096, 1, r2, b2_2, r4, 0, @0x4000
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L46
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0xc0c0, b0_0, r3, 0
    add r3, r6, r0
    ld f32, 1x4096, 1, r2, @0x100c0, b1_1, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vunary f32, 1x4096, 1, r2, @0x140c0, @0xc0c0, sigmoid
    vmul f32, 1x4096, 1, r2, @0xc0c0, @0x140c0, @0x100c0
    vadd f32, 1x4096, 1, r2, @0x100c0, @0xc0c0, @0x140c0
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r7, r0
    st f32, 1x4096, 1, r2, b2_2, r4, 0, @0x100c0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L7
L46:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

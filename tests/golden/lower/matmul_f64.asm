; lower/matmul_f64.graph compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_matmul_relu (class Flat)
; core function 0: units MatRows, tile 1, buffers [b0,b1,b2], workspace []
.kernel mmv_fused_matmul_relu aiv
.gm a f64 [] in
.gm b f64 [] in
.gm c f64 [] out
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
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
.arg s15 0
.arg s16 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r14, 8
    ldarg r15, 9
    ldarg r16, 10
    ldarg r19, 11
    ldarg r17, 12
    ldarg r20, 13
    ldarg r21, 14
    ldarg r22, 15
    ldarg r18, 16
    ldarg r23, 17
    ldarg r24, 18
    max r14, r14, 1
L14:
    bge r0, r1, L56
    div r2, r0, r14
    rem r3, r0, r14
    mul r4, r2, r17
    mul r5, r3, r20
    add r4, r4, r5
    add r4, r4, r19
    mul r6, r2, r18
    add r6, r6, r22
    mul r7, r0, r16
    movi r8, 0
L25:
    bge r8, r16, L54
    sub r9, r16, r8
    min r9, r9, 2048
    vdup f64, 1x2048, 1, r9, @0x0, 0.0
    movi r10, 0
L30:
    bge r10, r15, L47
    mul r11, r10, r21
    add r11, r11, r4
    ld f64, 1x1, 1, 1, @0xc000, a, r11, 0
    mul r12, r10, r23
    add r12, r12, r6
    mul r5, r8, r24
    add r12, r12, r5
    ld f64, 1x2048, 1, r9, @0x4000, b, r12, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast f64, 1x2048, 1, r9, @0x8000, @0xc000
    vmul f64, 1x2048, 1, r9, @0x8000, @0x8000, @0x4000
    vadd f64, 1x2048, 1, r9, @0x0, @0x0, @0x8000
    barrier
    add r10, r10, 1
    jmp L30
L47:
    add r13, r7, r8
    setf v, mte3, 0
    waitf v, mte3, 0
    st f64, 1x2048, 1, r9, c, r13, 0, @0x0
    barrier
    add r8, r8, 2048
    jmp L25
L54:
    add r0, r0, 1
    jmp L14
L56:
    end
; core function 1: units Kernel, tile 4096, buffers [b2,b3], workspace []
.kernel k_fused_matmul_relu aiv
.gm b0_3 f64 [] inout
.gm b1_2 f64 [] inout
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
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
.arg s15 0
.arg s16 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 5
    ldarg r6, 6
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L6:
    bge r0, r1, L37
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    add r3, r5, r0
    ld f64, 1x4096, 1, r2, @0x0, b0_3, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vunary f64, 1x4096, 1, r2, @0x8000, @0x0, relu
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st f64, 1x4096, 1, r2, b1_2, r4, 0, @0x8000
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L37
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f64, 1x4096, 1, r2, @0x100a0, b0_3, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vunary f64, 1x4096, 1, r2, @0x180a0, @0x100a0, relu
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st f64, 1x4096, 1, r2, b1_2, r4, 0, @0x180a0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L6
L37:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; fusion/concat_window.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: exp (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1], workspace []
.kernel k_exp aiv
.gm b0_0 f32 [] inout
.gm b1_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
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
    ld f32, 1x4096, 1, r2, @0x0, b0_0, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vunary f32, 1x4096, 1, r2, @0x4000, @0x0, exp
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0x4000
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L37
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x80a0, b0_0, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vunary f32, 1x4096, 1, r2, @0xc0a0, @0x80a0, exp
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0xc0a0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L6
L37:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 1: neg (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1], workspace []
.kernel k_neg aiv
.gm b0_1 f32 [] inout
.gm b1_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
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
    ld f32, 1x4096, 1, r2, @0x0, b0_1, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vunary f32, 1x4096, 1, r2, @0x4000, @0x0, neg
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0x4000
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L37
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x80a0, b0_1, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vunary f32, 1x4096, 1, r2, @0xc0a0, @0x80a0, neg
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0xc0a0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L6
L37:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 2: matmul (class Flat)
; core function 0: units CubeTiles, tile 1, buffers [b0,b1,b2], workspace []
.kernel mm_matmul aic
.gm a f32 [] in
.gm b f32 [] in
.gm c f32 [] out
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
    ldarg r0, 0
    ldarg r1, 1
    ldarg r13, 4
    ldarg r14, 5
    ldarg r15, 6
    add r16, r13, 63
    div r16, r16, 64
    max r16, r16, 1
    add r17, r15, 63
    div r17, r17, 64
    max r17, r17, 1
    add r18, r14, 63
    div r18, r18, 64
    mul r19, r13, r15
    mul r22, r15, 64
    ldarg r25, 7
    ldarg r20, 8
    ldarg r26, 9
    ldarg r27, 10
    ldarg r28, 11
    ldarg r21, 12
    ldarg r29, 13
    ldarg r30, 14
    mul r23, r26, 64
    mul r24, r29, 64
L25:
    bge r0, r1, L106
    rem r4, r0, r17
    div r12, r0, r17
    rem r3, r12, r16
    div r2, r12, r16
    mul r5, r3, -64
    add r5, r5, r13
    min r5, r5, 64
    mul r6, r4, -64
    add r6, r6, r15
    min r6, r6, 64
    mul r11, r2, r19
    mul r12, r3, r22
    add r11, r11, r12
    mul r12, r4, 64
    add r11, r11, r12
    movi r7, 0
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 0
    barrier
    add r7, r7, 1
L70:
    bge r7, r18, L100
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 1
    barrier
    add r7, r7, 1
    jmp L70
L100:
    setf m, fixp, 0
    waitf m, fixp, 0
    fixp f32, 64x64, r5, r6, c, r11, r15, @0x0, 0
    barrier
    add r0, r0, 1
    jmp L25
L106:
    end
; core function 1: units Kernel, tile 4096, buffers [], workspace []
.kernel k_matmul aiv
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
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L25
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    setf v, mte3, 0
    waitf v, mte3, 0
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L25
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    setf mte2, v, 1
    waitf mte2, v, 1
    setf v, mte3, 1
    waitf v, mte3, 1
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L4
L25:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 3: matmul (class Flat)
; core function 0: units CubeTiles, tile 1, buffers [b0,b1,b2], workspace []
.kernel mm_matmul aic
.gm a f32 [] in
.gm b f32 [] in
.gm c f32 [] out
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
    ldarg r0, 0
    ldarg r1, 1
    ldarg r13, 4
    ldarg r14, 5
    ldarg r15, 6
    add r16, r13, 63
    div r16, r16, 64
    max r16, r16, 1
    add r17, r15, 63
    div r17, r17, 64
    max r17, r17, 1
    add r18, r14, 63
    div r18, r18, 64
    mul r19, r13, r15
    mul r22, r15, 64
    ldarg r25, 7
    ldarg r20, 8
    ldarg r26, 9
    ldarg r27, 10
    ldarg r28, 11
    ldarg r21, 12
    ldarg r29, 13
    ldarg r30, 14
    mul r23, r26, 64
    mul r24, r29, 64
L25:
    bge r0, r1, L106
    rem r4, r0, r17
    div r12, r0, r17
    rem r3, r12, r16
    div r2, r12, r16
    mul r5, r3, -64
    add r5, r5, r13
    min r5, r5, 64
    mul r6, r4, -64
    add r6, r6, r15
    min r6, r6, 64
    mul r11, r2, r19
    mul r12, r3, r22
    add r11, r11, r12
    mul r12, r4, 64
    add r11, r11, r12
    movi r7, 0
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 0
    barrier
    add r7, r7, 1
L70:
    bge r7, r18, L100
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 1
    barrier
    add r7, r7, 1
    jmp L70
L100:
    setf m, fixp, 0
    waitf m, fixp, 0
    fixp f32, 64x64, r5, r6, c, r11, r15, @0x0, 0
    barrier
    add r0, r0, 1
    jmp L25
L106:
    end
; core function 1: units Kernel, tile 4096, buffers [], workspace []
.kernel k_matmul aiv
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
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L25
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    setf v, mte3, 0
    waitf v, mte3, 0
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L25
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    setf mte2, v, 1
    waitf mte2, v, 1
    setf v, mte3, 1
    waitf v, mte3, 1
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L4
L25:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 4: sqrt (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1], workspace []
.kernel k_sqrt aiv
.gm b0_1 f32 [] inout
.gm b1_6 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
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
    ld f32, 1x4096, 1, r2, @0x0, b0_1, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vunary f32, 1x4096, 1, r2, @0x4000, @0x0, sqrt
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_6, r4, 0, @0x4000
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L37
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x80a0, b0_1, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vunary f32, 1x4096, 1, r2, @0xc0a0, @0x80a0, sqrt
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_6, r4, 0, @0xc0a0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L6
L37:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 5: matmul (class Flat)
; core function 0: units CubeTiles, tile 1, buffers [b0,b1,b2], workspace []
.kernel mm_matmul aic
.gm a f32 [] in
.gm b f32 [] in
.gm c f32 [] out
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
    ldarg r0, 0
    ldarg r1, 1
    ldarg r13, 4
    ldarg r14, 5
    ldarg r15, 6
    add r16, r13, 63
    div r16, r16, 64
    max r16, r16, 1
    add r17, r15, 63
    div r17, r17, 64
    max r17, r17, 1
    add r18, r14, 63
    div r18, r18, 64
    mul r19, r13, r15
    mul r22, r15, 64
    ldarg r25, 7
    ldarg r20, 8
    ldarg r26, 9
    ldarg r27, 10
    ldarg r28, 11
    ldarg r21, 12
    ldarg r29, 13
    ldarg r30, 14
    mul r23, r26, 64
    mul r24, r29, 64
L25:
    bge r0, r1, L106
    rem r4, r0, r17
    div r12, r0, r17
    rem r3, r12, r16
    div r2, r12, r16
    mul r5, r3, -64
    add r5, r5, r13
    min r5, r5, 64
    mul r6, r4, -64
    add r6, r6, r15
    min r6, r6, 64
    mul r11, r2, r19
    mul r12, r3, r22
    add r11, r11, r12
    mul r12, r4, 64
    add r11, r11, r12
    movi r7, 0
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 0
    barrier
    add r7, r7, 1
L70:
    bge r7, r18, L100
    mul r8, r7, -64
    add r8, r8, r14
    min r8, r8, 64
    mul r9, r2, r20
    add r9, r9, r25
    mul r12, r3, r23
    add r9, r9, r12
    mul r12, r7, 64
    mul r12, r12, r27
    add r9, r9, r12
    mul r10, r2, r21
    add r10, r10, r28
    mul r12, r7, r24
    add r10, r10, r12
    mul r12, r4, 64
    mul r12, r12, r30
    add r10, r10, r12
    ldl1 f32, 64x64, r5, r8, @0x0, a, r9, r26
    ldl1 f32, 64x64, r8, r6, @0x4000, b, r10, r29
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 1
    barrier
    add r7, r7, 1
    jmp L70
L100:
    setf m, fixp, 0
    waitf m, fixp, 0
    fixp f32, 64x64, r5, r6, c, r11, r15, @0x0, 0
    barrier
    add r0, r0, 1
    jmp L25
L106:
    end
; core function 1: units Kernel, tile 4096, buffers [], workspace []
.kernel k_matmul aiv
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
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L25
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    setf v, mte3, 0
    waitf v, mte3, 0
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L25
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    setf mte2, v, 1
    waitf mte2, v, 1
    setf v, mte3, 1
    waitf v, mte3, 1
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L4
L25:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 6: fused_cat_sqrt (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_fused_cat_sqrt aiv
.gm b0_6 f32 [] inout
.gm b1_8 f32 [] inout
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
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L47
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 8
    ldarg r6, 9
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    waitf mte3, mte2, 0
    ld f32, 1x24536, 1, r2, @0x0, b0_6, r5, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x24536, 1, r2, b1_8, r6, 0, @0x0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L47
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 8
    ldarg r6, 9
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    waitf mte3, mte2, 1
    ld f32, 1x24536, 1, r2, @0x18000, b0_6, r5, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x24536, 1, r2, b1_8, r6, 0, @0x18000
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L47:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 7: cat (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_cat aiv
.gm b0_0 f32 [] inout
.gm b1_8 f32 [] inout
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
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L47
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 8
    ldarg r6, 9
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    waitf mte3, mte2, 0
    ld f32, 1x24536, 1, r2, @0x0, b0_0, r5, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x24536, 1, r2, b1_8, r6, 0, @0x0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L47
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 8
    ldarg r6, 9
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    waitf mte3, mte2, 1
    ld f32, 1x24536, 1, r2, @0x18000, b0_0, r5, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x24536, 1, r2, b1_8, r6, 0, @0x18000
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L47:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
